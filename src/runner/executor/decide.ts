/**
 * What a step's execution means for its rows, decided in one place for every
 * path that executes steps (held runs in advance.ts, a batch at a time or a
 * batch of one, and the start transaction in start.ts). Pure functions: given
 * a step, its run's status and an outcome or an error, they answer which
 * writes to make; the caller makes them through a `StepWriter`
 * (writer.ts), at once or buffered.
 */
import type { StartedAs } from '../../../sql/eventRuns/index.ts'
import type { StepRow, StepSpec } from '../../../sql/eventSteps/index.ts'
import type { RunStatus } from '../../../sql/states.ts'
import { retryDelayMs } from '../backoff.ts'
import { StepFailure, type StepOutcome } from '../steps/types.ts'

/** How the run's phase moves when it begins a step. */
export type PhaseMove =
  /** Entering the ending phase: `running → ending`, guarded, with the phase. */
  | { to: 'ending'; phase: string }
  /** Another phase, same status. */
  | { to: 'phase'; phase: string }

/**
 * The phase move for beginning `step` in a run that is `status` in `currentPhase`;
 * null when the step is in the phase the run is already in.
 */
export function phaseMove(
  step: Pick<StepRow, 'phase' | 'ending'>,
  status: RunStatus,
  currentPhase: string | null,
): PhaseMove | null {
  if (step.phase === currentPhase) return null
  if (step.ending && status === 'running') return { to: 'ending', phase: step.phase }
  return { to: 'phase', phase: step.phase }
}

/** True when a run in this status is advanced at all (a pause or cancel stops it before its next step). */
export function isAdvancing(status: RunStatus | null | undefined): status is 'running' | 'ending' {
  return status === 'running' || status === 'ending'
}

/**
 * The guards before a step is entered: answers when the run should next be
 * looked at if the step must not be entered now, or null when it may be.
 */
export function notYet(step: StepRow, now: Date): { wakeAt: Date | null } | null {
  // A parked cue: only its timeout (or a person) moves it.
  if (step.status === 'running' && step.parked && (!step.wakeAt || step.wakeAt > now))
    return { wakeAt: step.wakeAt }
  // Sleeping (a timer or a retry backoff) and not yet due.
  if (step.wakeAt && step.wakeAt > now) return { wakeAt: step.wakeAt }
  // Another owner is executing it under a live lease (only after a crash race).
  // A hint on this runner's clock; the begin is guarded on the database's.
  if (step.claimExpiresAt && step.claimExpiresAt > now && step.claimedBy !== null)
    return { wakeAt: step.claimExpiresAt }
  return null
}

/** A step that was asleep or parked and is now due resumes its attempt rather than starting a new one. */
export function isResume(step: StepRow): boolean {
  return step.status === 'running' && step.wakeAt !== null
}

/**
 * True when a step resumed from its timer needs no lease of its own: it
 * slept (a `core.wait`, not a cue parked on a person) and its kind is inline
 * with no side effects, so its attempt ends at once and touches nothing but
 * its log lines. The run's claim already keeps every other runner off it;
 * a lease would outlive nothing and cost a statement between the timer's
 * end and the step's. Its outcome is written as any other, guarded on the
 * step still `running`.
 */
export function resumesWithoutLease(
  step: StepRow,
  kind: { inline?: boolean; sideEffects: boolean } | undefined,
): boolean {
  return isResume(step) && !step.parked && kind?.inline === true && !kind.sideEffects
}

/**
 * How a due step is entered (executor/attempt.ts makes the attempt, whatever
 * its kind): `begin` for a pending step (a first attempt, a retry whose backoff
 * is over, an attempt given back at a shutdown) or one left executing by an
 * owner whose lease ran out (the begin's guard checks the lease), `resume` for
 * a step whose timer (or cue timeout) came due, null for a step parked on a
 * person. The caller has already checked that the step is due ({@link notYet}).
 */
export function entryOf(step: StepRow): 'begin' | 'resume' | null {
  if (isResume(step)) return 'resume'
  if (step.status === 'pending' || (step.status === 'running' && !step.parked)) return 'begin'
  return null
}

/** What a step's answer writes. */
export type OutcomeWrite =
  | { write: 'complete'; result: unknown }
  | { write: 'sleep'; until: Date }
  | { write: 'park'; until: Date | null }

export function outcomeWrite(outcome: StepOutcome): OutcomeWrite {
  switch (outcome.type) {
    case 'completed':
      return { write: 'complete', result: outcome.result ?? null }
    case 'sleep':
      return { write: 'sleep', until: outcome.until }
    case 'park':
      return { write: 'park', until: outcome.until }
  }
}

/** What a failed attempt writes. */
export type FailureWrite =
  /** Cut short by this runner's shutdown: the attempt is given back uncounted. */
  | { write: 'interrupt'; message: string }
  /** Tried again at `wakeAt`; the run is degraded meanwhile. */
  | { write: 'retry'; message: string; wakeAt: Date }
  /** Failed for good, the run goes on degraded (`onError: degrade`). */
  | { write: 'degrade'; message: string }
  /** Failed for good, and the run fails with it (`runError`). */
  | { write: 'fail'; message: string; runError: string }

function describeError(err: unknown): string {
  if (err instanceof Error) return err.message || err.name
  return String(err)
}

/**
 * The outcome → state mapping of a failed attempt. `step.attempts` counts the
 * attempt that failed; `hardStopped` is true when the runner's stop grace ran out.
 */
export function failureWrite(step: StepRow, err: unknown, now: Date, hardStopped: boolean): FailureWrite {
  const message = describeError(err).slice(0, 900)
  if (hardStopped) return { write: 'interrupt', message }
  const retryable = !(err instanceof StepFailure) || err.retryable
  if (retryable && step.attempts < step.maxAttempts)
    return {
      write: 'retry',
      message,
      wakeAt: new Date(now.getTime() + retryDelayMs(step.attempts, step.backoffMs)),
    }
  if (step.onError === 'degrade') return { write: 'degrade', message }
  return {
    write: 'fail',
    message,
    runError: `step ${step.seq} (${step.kind}) failed after ${step.attempts} attempt(s): ${message}`,
  }
}

/**
 * Where the start transaction leaves a run whose first `reached` steps ran
 * inside it: `completed` when every step ran; otherwise `running` (or
 * `ending`, when the step it stopped at is in the ending phase) under this
 * instance's lease, or released due now once the step budget is spent, so
 * other runs get a turn first.
 */
export function startedAs(
  specs: readonly Pick<StepSpec, 'phase' | 'ending'>[],
  reached: number,
  budget: number,
  claim: { owner: string; token: string; leaseUntil: Date },
  now: Date,
): StartedAs {
  if (reached >= specs.length) return { status: 'completed', phase: specs.at(-1)?.phase ?? null }
  // `current_phase` is the phase being run: the last step's that ran, else the
  // first step's. The advance moves it on when it begins a step of the next phase.
  const current = specs[Math.max(0, reached - 1)] as Pick<StepSpec, 'phase' | 'ending'>
  const status = current.ending ? 'ending' : 'running'
  if (reached >= budget) return { status, phase: current.phase, wakeAt: now }
  return {
    status,
    phase: current.phase,
    owner: claim.owner,
    token: claim.token,
    leaseUntil: claim.leaseUntil,
    leaseMs: claim.leaseUntil.getTime() - now.getTime(),
  }
}

/** What the executor answers for one step: take the next, or give the run back. */
export type StepVerdict =
  /** The step is done (completed, skipped, degraded failure): take the next one. */
  | { next: true }
  /** The run must wait: release with this wake time (null = until a person acts). */
  | { next: false; wakeAt: Date | null }
  /** The run reached a terminal status or is no longer ours to advance. */
  | { next: false; stop: true }
