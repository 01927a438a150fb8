/**
 * A GO hands its run to the runner in the same process.
 *
 * Why: between an answer's commit and its run's next step, the wake lane
 * sent three statements in a row on the runner's pool (its lease of what is
 * due, the read of the leased runs with their next steps, the step's begin),
 * each waiting its turn behind the rest of a loaded runner. The answer has
 * read the run, and the step after the cue, in its first statement; so its
 * transaction takes the runner's claim on the run where it used to wake it
 * (sql/eventRuns/handOff.ts), and after the commit the runner begins the next
 * step straight away (`WakeLane.adopt`): one statement where there were three.
 *
 * Where it does not apply, the answer wakes the run as before and the lane or
 * a pass claims it: no runner in the process (`RUNNER=off`; the runners'
 * doorbells are rung), a runner that is not active (stopping), a run still
 * held (its cue answered before its park was written, the run given back
 * with it: the give-back keeps the wake). A process that dies between the commit and the hand-over leaves a
 * claim that runs out like any other: the run is due again at the lease's end.
 */
import type { AnswerClaim, LeasedRun } from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'

export interface RunHandOff {
  /** A claim for the answer's transaction to take on its run; null while this runner takes none. */
  claim(): AnswerClaim | null
  /** After the commit: the run claimed under `claim`, as the answer read it, and its next step (null: none left). */
  adopt(run: LeasedRun, next: StepRow | null, claim: AnswerClaim): void
}
