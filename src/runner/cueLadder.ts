/**
 * A cue's ladder: who it is for, the reminders and escalations that go out
 * while nobody answers, and its deadline as the last rung.
 *
 * Timers cost nothing while idle: the cue parks with `wake_at` at its next
 * rung (like a `core.wait`), so no instance looks at it until then. At each
 * re-entry {@link DbCueLadder.sync} applies every rung due by now that was not
 * applied yet. A rung moves a counter of the ladder row by compare-and-set from
 * the value read, and its notification is written in the same transaction, so
 * a rung is sent exactly once whoever re-enters the cue, and a crash before
 * the commit leaves the rung to the next re-entry (nothing lost, nothing twice).
 */

import type { LadderRow } from '../../sql/cueLadders.ts'
import * as ladders from '../../sql/cueLadders.ts'
import { type Db, isDbUnavailable, type Queryable } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as events from '../../sql/notifications/events.ts'
import { body, type NotificationEventName, type RunSummary, teamsOf } from '../notify/payload.ts'
import { showTimeAfter } from './speed.ts'
import type { CueLadderPort, CueLadderState, CuePlan, StepRunInfo } from './steps/types.ts'

/** The actor the runner's own moves of a ladder are recorded under. */
export const LADDER_ACTOR = 'showrunner'

function summary(run: StepRunInfo): RunSummary {
  return {
    id: run.id,
    definitionId: run.definitionId,
    definitionSlug: run.definitionSlug,
    definitionTitle: run.definitionTitle,
    scope: run.scope,
    scheduledFor: run.scheduledFor,
    rehearsal: run.rehearsal,
  }
}

/** A cue event for `ladder` (as it is after the move). */
export function cueEvent(
  event: NotificationEventName,
  run: RunSummary,
  ladder: LadderRow,
  dedupe: string,
  at: Date,
): events.NewEvent {
  return {
    type: event,
    runId: run.id,
    stepId: ladder.stepId,
    dedupeKey: `cue:${ladder.stepId}:${dedupe}`,
    payload: body(event, at, { run, stepId: ladder.stepId, ladder }),
    occurredAt: at,
    definitionId: run.definitionId,
    cueTeams: teamsOf(ladder.assignees),
    rehearsal: run.rehearsal,
  }
}

/** Write a cue event for `ladder` (as it is after the move) inside `tx`. */
export async function emitCueEvent(
  tx: Queryable,
  event: NotificationEventName,
  run: RunSummary,
  ladder: LadderRow,
  dedupe: string,
  at: Date,
): Promise<number> {
  return events.emit(tx, cueEvent(event, run, ladder, dedupe, at))
}

/** When a rung `seconds` after `base` falls, in the show's time (a rehearsal at speed runs it faster). */
function rungTime(plan: CuePlan): (base: Date, seconds: number) => Date {
  return (base, seconds) => showTimeAfter(base, seconds, plan.run.speed)
}

/** The next rung after `now` of a ladder (reminder, escalation or deadline), or null. */
export function nextRung(plan: CuePlan, ladder: LadderRow, now: Date): Date | null {
  const at = rungTime(plan)
  const times = [
    ...plan.remindAfterSeconds.map((s) => at(ladder.openedAt, s)),
    ...plan.escalate.map((e) => at(ladder.openedAt, e.afterSeconds)),
    ...(ladder.deadlineAt ? [ladder.deadlineAt] : []),
  ].filter((t) => t.getTime() > now.getTime())
  if (times.length === 0) return null
  return new Date(Math.min(...times.map((t) => t.getTime())))
}

/** A cue asking for its ladder, answered when the batch it joined is written. */
interface Asking {
  plan: CuePlan
  resolve: (ladder: LadderRow) => void
  reject: (err: unknown) => void
}

export class DbCueLadder implements CueLadderPort {
  /** Cues asking for their ladders, to be read (and the new ones opened) together. */
  private asking: Asking[] = []
  private draining: Promise<void> | null = null
  private scheduled = false

  constructor(private readonly db: Db) {}

  async sync(plan: CuePlan, now: Date): Promise<CueLadderState> {
    const run = summary(plan.run)
    let ladder = await this.ladderOf(plan)
    if (!ladder.answer) {
      ladder = await this.remind(plan, run, ladder, now)
      ladder = await this.escalate(plan, run, ladder, now)
      if (ladder.deadlineAt && ladder.deadlineAt.getTime() <= now.getTime())
        ladder = await this.timeOut(run, ladder, now)
    }
    return { nextAt: nextRung(plan, ladder, now), deadlineAt: ladder.deadlineAt }
  }

  /**
   * The cue's ladder, opened (with its CUE_WAITING) when it is new. Set-wise:
   * every cue of a round asks in the same turn of the event loop (the runner
   * executes a round's cues at once), and they are read in one statement and
   * the new ones opened in one transaction of a few multi-row statements,
   * however many there are. Cues that ask while a batch is being written make
   * the next batch, as in a group commit.
   */
  private ladderOf(plan: CuePlan): Promise<LadderRow> {
    return new Promise<LadderRow>((resolve, reject) => {
      this.asking.push({ plan, resolve, reject })
      this.kick()
    })
  }

  /**
   * Write the cues asking, after this turn of the event loop (the rest of the
   * round asks meanwhile), unless a batch is being written: its drain takes
   * them, and a cue that asks after its last look is taken by the kick that
   * follows it.
   */
  private kick(): void {
    if (this.draining || this.scheduled || this.asking.length === 0) return
    this.scheduled = true
    setImmediate(() => {
      this.scheduled = false
      this.draining = this.drain().finally(() => {
        this.draining = null
        this.kick()
      })
    })
  }

  private async drain(): Promise<void> {
    while (this.asking.length > 0) {
      const batch = this.asking
      this.asking = []
      try {
        const rows = await this.openAll(batch.map((a) => a.plan))
        batch.forEach((a, i) => {
          a.resolve(rows[i] as LadderRow)
        })
      } catch (err) {
        // One cue's bad row must not fail the others': each alone, unless the database is away.
        if (batch.length === 1 || isDbUnavailable(err)) {
          for (const a of batch) a.reject(err)
          continue
        }
        for (const a of batch)
          await this.openAll([a.plan]).then(
            ([row]) => a.resolve(row as LadderRow),
            (e: unknown) => a.reject(e),
          )
      }
    }
  }

  /**
   * The ladders of `plans`, in order: read in one statement, the missing ones
   * opened in one transaction. A cue on its first entry is not read first:
   * only its own step's earlier entry could have opened its ladder, so a burst
   * of new cues (a show's cues at the top of the hour) parks a statement
   * sooner. Should one be there all the same, the opening makes fewer rows
   * than it was given and the rows are read then.
   */
  private async openAll(plans: readonly CuePlan[]): Promise<LadderRow[]> {
    const toRead = [...new Set(plans.filter((p) => p.firstEntry !== true).map((p) => p.stepId))]
    const found = new Map((await ladders.getMany(this.db, toRead)).map((l) => [l.stepId, l]))
    const fresh = new Map<number, { row: LadderRow; run: RunSummary }>()
    for (const plan of plans) {
      if (found.has(plan.stepId) || fresh.has(plan.stepId)) continue
      const deadlineAt =
        plan.timeoutSeconds === undefined ? null : rungTime(plan)(plan.openedAt, plan.timeoutSeconds)
      fresh.set(plan.stepId, {
        run: summary(plan.run),
        row: {
          stepId: plan.stepId,
          runId: plan.run.id,
          prompt: plan.prompt.slice(0, 1000),
          openedAt: plan.openedAt,
          deadlineAt,
          assignees: plan.assignees,
          exclusive: plan.exclusive,
          escalationLevel: 0,
          remindersSent: 0,
          answer: null,
        },
      })
    }
    if (fresh.size > 0) {
      const opening = [...fresh.values()]
      // The event's dedupe key (cue:ID:waiting) keeps CUE_WAITING once even
      // for a row another writer made meanwhile.
      const rows = opening.map((o) => o.row)
      const waiting = opening.map((o) => cueEvent('CUE_WAITING', o.run, o.row, 'waiting', o.row.openedAt))
      const opens = ladders.openManyStatements(rows)
      // One transaction in one round trip (its BEGIN and COMMIT in the text),
      // where a show's first cues opening together took five; an opening past
      // one text's size goes in parts of the same transaction (db.ts).
      const answers = await this.db.commitAll([...opens, ...events.emitManyStatements(waiting).flat()], {
        retryable: true,
      })
      const made = answers.slice(0, opens.length).reduce((n, a) => n + a.affectedRows, 0)
      // The rows this call made are the rows as written: a burst of cues
      // opening skips a read each. When another writer made some (a racing
      // re-entry), they are read.
      if (made === opening.length) for (const [id, o] of fresh) found.set(id, o.row)
      else for (const l of await ladders.getMany(this.db, [...fresh.keys()])) found.set(l.stepId, l)
    }
    return plans.map((plan) => {
      const ladder = found.get(plan.stepId)
      if (!ladder) throw new Error(`cue ladder of step ${plan.stepId} is missing after opening it`)
      return ladder
    })
  }

  private async remind(plan: CuePlan, run: RunSummary, ladder: LadderRow, now: Date): Promise<LadderRow> {
    const at = rungTime(plan)
    const due = plan.remindAfterSeconds.filter(
      (s) => at(ladder.openedAt, s).getTime() <= now.getTime(),
    ).length
    if (due <= ladder.remindersSent) return ladder
    const from = ladder.remindersSent
    const moved = await this.db.transaction(
      async (tx) => {
        if (!(await ladders.advanceReminders(tx, ladder.stepId, from, due))) return false
        for (let k = from + 1; k <= due; k++) {
          const seconds = plan.remindAfterSeconds[k - 1] as number
          const rung = { ...ladder, remindersSent: k }
          await emitCueEvent(tx, 'CUE_REMINDER', run, rung, `reminder:${k}`, at(ladder.openedAt, seconds))
          await logs.append(tx, {
            runId: run.id,
            stepId: ladder.stepId,
            level: 'info',
            message: `cue reminder ${k} of ${plan.remindAfterSeconds.length} (${seconds}s without an answer)`,
            actor: LADDER_ACTOR,
            data: { ladder: 'reminder', reminder: k },
          })
        }
        return true
      },
      { retryable: true },
    )
    return moved ? { ...ladder, remindersSent: due } : ((await ladders.get(this.db, ladder.stepId)) ?? ladder)
  }

  private async escalate(plan: CuePlan, run: RunSummary, ladder: LadderRow, now: Date): Promise<LadderRow> {
    const at = rungTime(plan)
    const due = plan.escalate.filter((e) => at(ladder.openedAt, e.afterSeconds).getTime() <= now.getTime())
    if (due.length <= ladder.escalationLevel) return ladder
    const from = ladder.escalationLevel
    const assignees = [...ladder.assignees]
    for (const e of due.slice(from)) if (!assignees.includes(e.to)) assignees.push(e.to)
    const moved = await this.db.transaction(
      async (tx) => {
        if (!(await ladders.escalate(tx, ladder.stepId, from, due.length, assignees))) return false
        const partial = [...ladder.assignees]
        for (let k = from + 1; k <= due.length; k++) {
          const rung = due[k - 1] as { afterSeconds: number; to: string }
          if (!partial.includes(rung.to)) partial.push(rung.to)
          const row = { ...ladder, escalationLevel: k, assignees: [...partial] }
          await emitCueEvent(
            tx,
            'CUE_ESCALATED',
            run,
            row,
            `escalation:${k}`,
            at(ladder.openedAt, rung.afterSeconds),
          )
          await logs.append(tx, {
            runId: run.id,
            stepId: ladder.stepId,
            level: 'warn',
            message: `cue escalated to ${rung.to} (level ${k}, ${rung.afterSeconds}s without an answer)`,
            actor: LADDER_ACTOR,
            data: { ladder: 'escalation', level: k, to: rung.to },
          })
        }
        return true
      },
      { retryable: true },
    )
    return moved
      ? { ...ladder, escalationLevel: due.length, assignees }
      : ((await ladders.get(this.db, ladder.stepId)) ?? ladder)
  }

  private async timeOut(run: RunSummary, ladder: LadderRow, now: Date): Promise<LadderRow> {
    const answer = {
      outcome: 'timedOut' as const,
      by: 'timeout',
      via: 'timeout' as const,
      at: now,
      note: null,
    }
    await this.db.transaction(
      async (tx) => {
        if (!(await ladders.recordAnswer(tx, ladder.stepId, answer))) return
        await emitCueEvent(tx, 'CUE_TIMED_OUT', run, { ...ladder, answer }, 'timedOut', now)
      },
      { retryable: true },
    )
    return (await ladders.get(this.db, ladder.stepId)) ?? ladder
  }
}
