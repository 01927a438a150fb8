/**
 * The batch path: advance many claimed runs together, in lock-step rounds of
 * a few multi-row statements each, instead of a dozen statements per run per
 * step. A top-of-the-hour show for thousands of scopes (announce, wait, call
 * out, wrap up) is as many rounds as it has steps, whatever the number of runs.
 *
 * Each round: re-read the statuses of the whole batch in one query (a pause
 * or cancel lands before the next step), read each run's next step, finish
 * the runs with none left, set aside the ones whose step is not due yet, move
 * phases, renew the runs' leases when a step may outlast them, begin (or, for
 * a timer that came due, resume) every step set-wise, execute them (at most
 * `stepConcurrency` at once; see executor/round.ts), writing their outcomes
 * and log lines set-wise as they come (executor/writer.ts `GroupWriter`):
 * completions, timers and parked cues. Runs whose step completed take the
 * next round; the others are released, each due when it next needs the runner.
 *
 * The guards, phase moves and outcome rules are the per-run path's
 * (executor/decide.ts), written set-wise (executor/writer.ts): steps begin
 * only from `pending` (resume only from a due timer), complete or set aside
 * only from `running`, and runs finish through the guarded
 * `running | ending → completed` transition; a failed attempt's retry (or
 * failure for good under `onError: degrade`) is written with the outcomes, its
 * run degraded, and a retry's success restores the run's health. What the
 * batch leaves to the per-run engine: unknown kinds, rehearsals of side
 * effects, steps another owner is executing, and the runs a round lets go: a
 * step that fails its run, an attempt cut short by a shutdown, and a
 * straggler, each finished alone as soon as its step answers.
 */

import { isDbUnavailable } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import type { RunStatus } from '../../sql/states.ts'
import { advanceRun, concludeStep, parkedLine } from './engine.ts'
import { type AttemptResult, attempt } from './executor/attempt.ts'
import { batchEntry, failureWrite, isAdvancing, notYet, phaseMove } from './executor/decide.ts'
import { degradeLine, retryLine } from './executor/failure.ts'
import { executeRound, type Settled } from './executor/round.ts'
import {
  BufferedWriter,
  GroupWriter,
  immediateWriter,
  recordOutcome,
  type StepWriter,
} from './executor/writer.ts'
import type { ClaimedRun, EngineDeps, RunAnswer } from './types.ts'

export interface BatchOutcome {
  /** Runs whose next step needs the per-run engine, with their fresh status and phase. */
  handOff: ClaimedRun[]
  /** Runs this batch is done with: release them (due now if still in flight). */
  release: number[]
  /** Runs to release due at a given time (a timer, a cue's timeout, a retry; null: when a person acts). */
  releaseAt: { id: number; wakeAt: Date | null }[]
}

/**
 * Told of each run the batch lets go on alone (its step failed the run, was
 * cut short, or outlasted its round), as soon as it is let go: `done` settles
 * when the run has gone as far as it can, saying when to release it. The
 * batch no longer answers for it, whatever becomes of the rest of the batch.
 */
export type OnAlone = (run: ClaimedRun, done: Promise<RunAnswer>) => void

/** One run's step in a round. */
interface Entry {
  run: ClaimedRun
  /** The step as read before it was entered. */
  step: StepRow
  /** The run's status when the round read it. */
  status: RunStatus
  how: 'begin' | 'resume'
}

export async function advanceBatch(
  deps: EngineDeps,
  claimed: readonly ClaimedRun[],
  onAlone: OnAlone,
): Promise<BatchOutcome> {
  const { db, registry } = deps
  const byId = new Map(claimed.map((r) => [r.id, r]))
  const out: BatchOutcome = { handOff: [], release: [], releaseAt: [] }
  let active = claimed.map((r) => r.id)
  const budget = deps.maxStepsPerClaim ?? 25
  // When the claims run out, on the runner's clock, at the earliest: the
  // runner renews claims older than a third of the lease before it gets here.
  let leaseEnds = deps.clock.now().getTime() + (deps.leaseMs * 2) / 3

  const writer = new BufferedWriter(db, deps.hardStop)

  for (let round = 0; round < budget && active.length > 0; round++) {
    if (deps.stopping()) break
    const snapshots = await runs.statusesOf(db, active)
    const live = new Map(snapshots.filter((s) => isAdvancing(s.status)).map((s) => [s.id, s]))
    for (const id of active) if (!live.has(id)) out.release.push(id)
    if (live.size === 0) {
      active = []
      break
    }
    const next = await steps.nextSteps(db, [...live.keys()])
    const now = deps.clock.now()
    let entries: Entry[] = []
    for (const [id, snap] of live) {
      const base = byId.get(id) as ClaimedRun
      const run: ClaimedRun = {
        ...base,
        status: snap.status,
        currentPhase: snap.currentPhase,
        health: snap.health,
      }
      const step = next.get(id)
      if (!step) {
        await writer.finishRun(id)
        out.release.push(id)
        continue
      }
      const wait = notYet(step, now)
      if (wait) {
        out.releaseAt.push({ id, wakeAt: wait.wakeAt })
        continue
      }
      const how = batchEntry(step, registry.get(step.kind), run.rehearsal)
      if (how === null) {
        out.handOff.push(run)
        continue
      }
      const move = phaseMove(step, snap.status, snap.currentPhase)
      if (move) await writer.movePhase(id, move)
      entries.push({ run, step, status: snap.status as RunStatus, how })
    }
    // Runs finished and phases moved, before any step of the round begins.
    await writer.flush()
    if (entries.length === 0) {
      active = []
      break
    }

    // The run's lease (and the step's) must outlive the step, or another
    // instance would take it mid-step: renewed set-wise, as the per-run engine
    // extends it, when the round's longest timeout reaches past what is left
    // of it, or half of it is gone.
    const needed = Math.max(...entries.map((e) => e.step.timeoutMs + 5000))
    const leaseMs = Math.max(deps.leaseMs, needed)
    const leaseUntil = new Date(now.getTime() + leaseMs)
    if (now.getTime() + needed > leaseEnds || leaseEnds - now.getTime() < deps.leaseMs / 2) {
      const held = await runs.renewClaims(
        db,
        entries.map((e) => e.run.id),
        deps.owner,
        leaseUntil,
        now,
      )
      // Lost (its lease ran out and another instance took it): not ours to advance or release.
      entries = entries.filter((e) => held.has(e.run.id))
      leaseEnds = leaseUntil.getTime()
    }
    const toBegin = entries.filter((e) => e.how === 'begin').map((e) => e.step.id)
    const toResume = entries.filter((e) => e.how === 'resume').map((e) => e.step.id)
    let entered: number
    try {
      entered =
        (await steps.beginMany(db, toBegin, deps.owner, leaseUntil, now)) +
        (await steps.resumeMany(db, toResume, deps.owner, leaseUntil, now))
    } catch (err) {
      // A database that went away mid-reply may have committed the begin and
      // lost only its answer. Nothing ran yet, so once it answers again the
      // steps are put back as they were (no lease, no attempt counted), as the
      // per-run engine does for one step.
      if (isDbUnavailable(err)) await recordOutcome(deps.hardStop, () => takeBack(deps, entries))
      throw err
    }
    if (entered !== entries.length) {
      // A person skipped or cancelled some steps meanwhile, or another owner
      // holds one: execute only those entered; the per-run engine sorts out the rest.
      const mine = new Set(
        (
          await steps.getByIds(
            db,
            entries.map((e) => e.step.id),
          )
        )
          .filter((s) => s.status === 'running' && s.claimedBy === deps.owner)
          .map((s) => s.id),
      )
      for (const e of entries) if (!mine.has(e.step.id)) out.handOff.push(e.run)
      entries = entries.filter((e) => mine.has(e.step.id))
    }

    const executing = entries.map((e) => executingRow(e, now))
    // Outcomes and log lines are written as they come, set-wise (GroupWriter);
    // a failed attempt goes on alone at once (executor/failure.ts writes it run by run).
    const recorder = new GroupWriter(db, deps.hardStop)
    let roundOpen = true
    // A step's lines are written while it runs, as on the per-run path: with
    // the round's writes while the round lasts, at once by a straggler.
    const lines: Pick<StepWriter, 'log'> = {
      async log(line) {
        if (roundOpen) recorder.add((w) => void w.log(line))
        else await logs.append(db, line)
      },
    }
    const stillActive: number[] = []
    const finished: { kind: string; how: 'completed' | 'sleep' | 'park' | 'retry' | 'failed' }[] = []
    const record = (i: number, result: AttemptResult) => {
      const e = entries[i] as Entry
      const step = executing[i] as StepRow
      if (!result.ok) {
        recordFailure(e, step, result)
        return
      }
      const { write } = result
      recorder.add((w) => {
        if (write.write === 'complete') void w.complete(step.id, write.result)
        else w.setAsideStep(step.id, write.until, write.write === 'park')
        if (write.write === 'park') void w.log(parkedLine(e.run, step))
        // A retry that succeeded: the run is no longer degraded for it.
        if (write.write === 'complete' && step.attempts > 1 && step.lastError) w.restoreHealth(e.run.id)
      })
      if (write.write === 'complete') {
        finished.push({ kind: step.kind, how: 'completed' })
        stillActive.push(e.run.id)
      } else {
        finished.push({ kind: step.kind, how: write.write })
        out.releaseAt.push({ id: e.run.id, wakeAt: write.until })
      }
    }
    // A failed attempt with a retry left, or failed for good under `onError:
    // degrade`, is written with the round's outcomes (a receiver down at the
    // top of the hour fails a whole batch at once). Failing the run, and an
    // attempt cut short by a shutdown, go on alone (executor/failure.ts).
    const recordFailure = (e: Entry, step: StepRow, result: AttemptResult & { ok: false }) => {
      const decided = result.failure
      if (decided.write === 'retry') {
        recorder.add((w) => {
          void w.log(retryLine(e.run.id, step, decided.message, decided.wakeAt))
          w.failAttempt(step.id, decided.message, decided.wakeAt)
        })
        finished.push({ kind: step.kind, how: 'retry' })
        out.releaseAt.push({ id: e.run.id, wakeAt: decided.wakeAt })
      } else if (decided.write === 'degrade') {
        recorder.add((w) => {
          void w.log(degradeLine(e.run.id, step, decided.message))
          w.failAttempt(step.id, decided.message, null)
        })
        finished.push({ kind: step.kind, how: 'failed' })
        stillActive.push(e.run.id)
      } else {
        onAlone(e.run, finishAlone(deps, e, step, result))
      }
    }
    const outcomes = await executeRound(
      entries.map((e, i) => ({
        unlimited: registry.get(e.step.kind)?.inline === true,
        run: () =>
          attempt(deps, { run: e.run, step: executing[i] as StepRow, resumed: e.how === 'resume', lines }),
      })),
      deps.stepConcurrency ?? 8,
      { onSettled: (i, done) => record(i, attemptOf(deps, executing[i] as StepRow, done)) },
    )
    roundOpen = false
    for (const [i, pending] of outcomes.pending) {
      const e = entries[i] as Entry
      const step = executing[i] as StepRow
      const done = pending.then((r) => finishAlone(deps, e, step, attemptOf(deps, step, r)))
      onAlone(e.run, done)
    }
    // Every outcome of the round is written before any run of it takes its next step.
    await recorder.settled()
    for (const f of finished) deps.observer?.stepFinished?.(f.kind, f.how)
    active = stillActive
  }
  out.release.push(...active)
  return out
}

/** An attempt never rejects (executor/attempt.ts); should one, its error is its failure. */
function attemptOf(deps: EngineDeps, step: StepRow, settled: Settled<AttemptResult>): AttemptResult {
  if (settled.ok) return settled.value
  const { error } = settled
  return { ok: false, error, failure: failureWrite(step, error, deps.clock.now(), deps.hardStop.aborted) }
}

/** Put back the steps of a round whose begin (or resume) may have committed unanswered. */
async function takeBack(deps: EngineDeps, entries: readonly Entry[]): Promise<void> {
  // Steps as a materialised program left them go back set-wise; any other begun step row by row.
  const pristine = (st: StepRow) => st.attempts === 0 && !st.lastError && !st.wakeAt && !st.startedAt
  const begun = entries.filter((e) => e.how === 'begin')
  await steps.takeBackEntered(
    deps.db,
    begun.filter((e) => pristine(e.step)).map((e) => e.step.id),
    entries.filter((e) => e.how === 'resume').map((e) => e.step.id),
    deps.owner,
  )
  for (const e of begun) if (!pristine(e.step)) await steps.takeBackBegin(deps.db, e.step, deps.owner)
}

/** The step as it is while this attempt executes (what its handler and its outcome's writes see). */
function executingRow(e: Entry, now: Date): StepRow {
  const { step } = e
  if (e.how === 'resume') return step
  // As beginMany wrote it: a first start is stamped with the round's `now`, so
  // a `core.wait {seconds}` counts from the same instant for the whole batch.
  return { ...step, status: 'running', attempts: step.attempts + 1, startedAt: step.startedAt ?? now }
}

/**
 * A run the round lets go (its step failed, or outlasted the round) goes on
 * alone as soon as its step answers: the outcome is written at once, then the
 * per-run engine takes the run on from there.
 */
async function finishAlone(
  deps: EngineDeps,
  e: Entry,
  step: StepRow,
  result: AttemptResult,
): Promise<RunAnswer> {
  const verdict = await concludeStep(
    deps,
    immediateWriter(deps.db, deps.hardStop),
    e.run,
    step,
    result,
    e.status,
  )
  if ('stop' in verdict) return { stop: true }
  if (!verdict.next) return { wakeAt: verdict.wakeAt }
  return advanceRun(deps, e.run)
}
