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
import type { Db, Queryable } from '../../sql/db.ts'
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

/** Write a cue event for `ladder` (as it is after the move) inside `tx`. */
export async function emitCueEvent(
  tx: Queryable,
  event: NotificationEventName,
  run: RunSummary,
  ladder: LadderRow,
  dedupe: string,
  at: Date,
): Promise<number> {
  return events.emit(tx, {
    type: event,
    runId: run.id,
    stepId: ladder.stepId,
    dedupeKey: `cue:${ladder.stepId}:${dedupe}`,
    payload: body(event, at, { run, stepId: ladder.stepId, ladder }),
    occurredAt: at,
    definitionId: run.definitionId,
    cueTeams: teamsOf(ladder.assignees),
    rehearsal: run.rehearsal,
  })
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

export class DbCueLadder implements CueLadderPort {
  constructor(private readonly db: Db) {}

  async sync(plan: CuePlan, now: Date): Promise<CueLadderState> {
    const run = summary(plan.run)
    let ladder = await ladders.get(this.db, plan.stepId)
    if (!ladder) ladder = await this.open(plan, run)
    if (!ladder.answer) {
      ladder = await this.remind(plan, run, ladder, now)
      ladder = await this.escalate(plan, run, ladder, now)
      if (ladder.deadlineAt && ladder.deadlineAt.getTime() <= now.getTime())
        ladder = await this.timeOut(run, ladder, now)
    }
    return { nextAt: nextRung(plan, ladder, now), deadlineAt: ladder.deadlineAt }
  }

  private async open(plan: CuePlan, run: RunSummary): Promise<LadderRow> {
    const at = rungTime(plan)
    const openedAt = plan.openedAt
    const deadlineAt = plan.timeoutSeconds === undefined ? null : at(openedAt, plan.timeoutSeconds)
    const made = await this.db.transaction(
      async (tx): Promise<LadderRow | null> => {
        const fresh = { stepId: plan.stepId, runId: run.id, prompt: plan.prompt, openedAt, deadlineAt }
        const opened = await ladders.open(tx, {
          ...fresh,
          assignees: plan.assignees,
          exclusive: plan.exclusive,
        })
        if (!opened) return null
        const row: LadderRow = {
          ...fresh,
          assignees: plan.assignees,
          exclusive: plan.exclusive,
          escalationLevel: 0,
          remindersSent: 0,
          answer: null,
        }
        await emitCueEvent(tx, 'CUE_WAITING', run, row, 'waiting', openedAt)
        return row
      },
      { retryable: true },
    )
    // The row this call made is the row as written: a burst of cues opening
    // skips a read each. Another writer's row (a racing re-entry) is read.
    if (made) return { ...made, prompt: made.prompt.slice(0, 1000) }
    const ladder = await ladders.get(this.db, plan.stepId)
    if (!ladder) throw new Error(`cue ladder of step ${plan.stepId} is missing after opening it`)
    return ladder
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
