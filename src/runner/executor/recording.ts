/**
 * What the attempts of a round (or of one straggler) came to, written
 * set-wise as they come (writer.ts `GroupWriter`): the runs whose step is
 * done go on to the next round, the others are let go with their answer
 * once it is written. A failure that fails its run is written at once, run
 * by run (failure.ts). advance.ts runs the rounds; this records them.
 */
import type { StepRow } from '../../../sql/eventSteps/index.ts'
import type { RunStatus } from '../../../sql/states.ts'
import type { ClaimedRun, EngineDeps, RunAnswer } from '../types.ts'
import type { AttemptResult } from './attempt.ts'
import { parkedLine } from './context.ts'
import { failureWrite } from './decide.ts'
import { degradeLine, handleFailure, retryLine } from './failure.ts'
import type { Settled } from './round.ts'
import { GroupWriter } from './writer.ts'

/** Told once per run, when the batch lets it go: when it next needs the runner, or `stop`. */
export type OnAnswer = (run: ClaimedRun, answer: RunAnswer) => void

/** One run's step in a round. */
export interface Entry {
  run: ClaimedRun
  /** The step as read before it was entered. */
  step: StepRow
  /** The step as it is while this attempt executes. */
  executing: StepRow
  /** The run's status when the round read it. */
  status: RunStatus
  how: 'begin' | 'resume'
}

/**
 * What the attempts of a round (or one straggler) came to, written set-wise
 * as they come: the runs whose step is done take the next step, the others
 * are let go with their answer once it is written.
 */
export class Recording {
  readonly writer: GroupWriter
  /** Runs whose step is done (completed, failed under `degrade`, skipped meanwhile): on to the next. */
  readonly next: ClaimedRun[] = []
  readonly leaving: [ClaimedRun, RunAnswer][] = []
  /** Failures written one run at a time, at once (executor/failure.ts). */
  private readonly alone: Promise<void>[] = []
  private readonly finished: { kind: string; how: 'completed' | 'sleep' | 'park' | 'retry' | 'failed' }[] = []

  /** Runs whose park gives their claim back in its own write, told as soon as it is made. */
  private readonly parking = new Map<number, ClaimedRun>()

  constructor(
    private readonly deps: EngineDeps,
    tell: OnAnswer,
  ) {
    this.writer = new GroupWriter(deps.db, deps.hardStop, {
      parked: () => deps.observer?.cuesParked?.(),
      givenBack: (given) => {
        for (const g of given) {
          const run = this.parking.get(g.id)
          this.parking.delete(g.id)
          if (run) tell(run, { wakeAt: g.wakeAt, givenBack: true })
        }
      },
    })
  }

  record(e: Entry, result: AttemptResult): void {
    const step = e.executing
    if (!result.ok) {
      this.recordFailure(e, result)
      return
    }
    const { write } = result
    const parks = write.write === 'park'
    if (parks) this.parking.set(e.run.id, e.run)
    this.writer.add((w) => {
      if (write.write === 'complete') void w.complete(step.id, write.result)
      else w.setAsideStep(step.id, write.until, parks)
      // Free the moment its cue can be seen (writer.ts `giveBack`).
      if (parks) w.giveBack(e.run, this.deps.owner, write.until)
      // Logged when the cue first parks; a rung that parks it again logs its own line (cueLadder.ts).
      if (parks && e.how === 'begin') void w.log(parkedLine(e.run, step))
      // A retry that succeeded: the run is no longer degraded for it.
      if (write.write === 'complete' && step.attempts > 1 && step.lastError) w.restoreHealth(e.run.id)
    })
    if (write.write === 'complete') {
      this.finished.push({ kind: step.kind, how: 'completed' })
      this.next.push(e.run)
    } else {
      this.finished.push({ kind: step.kind, how: write.write })
      // A park is answered by its own write, once made (see the constructor).
      if (!parks) this.leaving.push([e.run, { wakeAt: write.until }])
    }
  }

  /**
   * A failed attempt with a retry left, or failed for good under `onError:
   * degrade`, is written with the round's outcomes (a receiver down at the top
   * of the hour fails a whole batch at once). Failing the run, and an attempt
   * cut short by a shutdown, are written at once, run by run.
   */
  private recordFailure(e: Entry, result: AttemptResult & { ok: false }): void {
    const step = e.executing
    const decided = result.failure
    if (decided.write === 'retry') {
      this.writer.add((w) => {
        void w.log(retryLine(e.run.id, step, decided.message, decided.wakeAt))
        w.failAttempt(step.id, decided.message, decided.wakeAt)
      })
      this.finished.push({ kind: step.kind, how: 'retry' })
      this.leaving.push([e.run, { wakeAt: decided.wakeAt }])
    } else if (decided.write === 'degrade') {
      this.writer.add((w) => {
        void w.log(degradeLine(e.run.id, step, decided.message))
        w.failAttempt(step.id, decided.message, null)
      })
      this.finished.push({ kind: step.kind, how: 'failed' })
      this.next.push(e.run)
    } else {
      this.alone.push(
        handleFailure(this.deps, e.run, step, decided, e.status).then(
          (verdict) => {
            if (verdict.next) this.next.push(e.run)
            else this.leaving.push([e.run, 'stop' in verdict ? { stop: true } : { wakeAt: verdict.wakeAt }])
          },
          // Its own writes failed: this run alone is given back, the round goes on.
          (error: unknown) => void this.leaving.push([e.run, { error }]),
        ),
      )
    }
  }

  /** Wait until everything recorded is written; throws the first set-wise write's error. */
  async settled(): Promise<void> {
    await Promise.all(this.alone)
    await this.writer.settled()
    for (const f of this.finished) this.deps.observer?.stepFinished?.(f.kind, f.how)
  }
}

/** An attempt never rejects (executor/attempt.ts); should one, its error is its failure. */
export function resultOf(deps: EngineDeps, e: Entry, settled: Settled<AttemptResult>): AttemptResult {
  if (settled.ok) return settled.value
  const { error } = settled
  return {
    ok: false,
    error,
    failure: failureWrite(e.executing, error, deps.clock.now(), deps.hardStop.aborted),
  }
}
