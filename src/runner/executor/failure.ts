/**
 * Writing a failed attempt's outcome, as decided by `failureWrite`
 * (decide.ts). Failures are rare and each needs its own guarded statements
 * (and the run's fate with them), so every path that executes steps, the
 * batch one included, writes them here, one run at a time, at once.
 */
import type { Db } from '../../../sql/db.ts'
import type { NewLog } from '../../../sql/eventRunLogs.ts'
import * as logs from '../../../sql/eventRunLogs.ts'
import type { RunRow } from '../../../sql/eventRuns/index.ts'
import * as runs from '../../../sql/eventRuns/index.ts'
import type { StepRow } from '../../../sql/eventSteps/index.ts'
import * as steps from '../../../sql/eventSteps/index.ts'
import type { RunStatus } from '../../../sql/states.ts'
import type { Clock } from '../clock.ts'
import type { RunnerObserver } from '../types.ts'
import type { FailureWrite, StepVerdict } from './decide.ts'
import { recordOutcome } from './writer.ts'

export interface FailureDeps {
  db: Db
  clock: Clock
  hardStop: AbortSignal
  observer?: RunnerObserver
}

/** Write a failed attempt's outcome, as `decided` (executor/attempt.ts); answers what the run does next. */
export async function handleFailure(
  deps: FailureDeps,
  run: RunRow,
  step: StepRow,
  decided: FailureWrite,
  runStatus: RunStatus,
): Promise<StepVerdict> {
  const now = deps.clock.now()
  const { message } = decided
  switch (decided.write) {
    case 'interrupt': {
      // Cut short by this runner's shutdown (a deploy), not failed by the step:
      // the attempt is not counted, the run is not degraded, and the step runs
      // again (same idempotency key) as soon as another instance takes the run.
      const givenBack = await recordOutcome(deps.hardStop, () =>
        steps.interrupt(deps.db, step.id, message, now),
      )
      if (!givenBack) return { next: true }
      await logs.append(deps.db, {
        runId: run.id,
        stepId: step.id,
        level: 'info',
        message: `${step.kind} attempt ${step.attempts} interrupted (${message}); it will run again`,
      })
      deps.observer?.stepFinished?.(step.kind, 'retry')
      return { next: false, wakeAt: now }
    }
    case 'retry': {
      const { wakeAt } = decided
      if (!(await recordOutcome(deps.hardStop, () => steps.scheduleRetry(deps.db, step.id, message, wakeAt))))
        return { next: true }
      await runs.setHealth(deps.db, run.id, 'degraded')
      await logs.append(deps.db, retryLine(run.id, step, message, wakeAt))
      deps.observer?.stepFinished?.(step.kind, 'retry')
      return { next: false, wakeAt }
    }
    case 'degrade': {
      const failed = await recordOutcome(deps.hardStop, () => steps.fail(deps.db, step.id, message))
      deps.observer?.stepFinished?.(step.kind, 'failed')
      if (!failed) return { next: true } // a person skipped or cancelled it meanwhile
      await runs.setHealth(deps.db, run.id, 'degraded')
      await logs.append(deps.db, degradeLine(run.id, step, message))
      return { next: true }
    }
    case 'fail': {
      const error = decided.runError
      // The step, the run and the run's other steps move in one transaction.
      const { stepFailed, runFailed } = await recordOutcome(deps.hardStop, () =>
        runs.failWithStep(
          deps.db,
          run.id,
          [runStatus, 'running', 'ending'],
          { id: step.id, error: message },
          error,
        ),
      )
      deps.observer?.stepFinished?.(step.kind, 'failed')
      if (!stepFailed) return { next: true } // a person skipped or cancelled it meanwhile
      if (runFailed) {
        await logs.append(deps.db, {
          runId: run.id,
          stepId: step.id,
          level: 'error',
          message: `run failed: ${error}`,
        })
      }
      return { next: false, stop: true }
    }
  }
}

/** The run's log line for a failed attempt that will be retried at `wakeAt`. */
export function retryLine(runId: number, step: StepRow, message: string, wakeAt: Date): NewLog {
  return {
    runId,
    stepId: step.id,
    level: 'warn',
    message: `${step.kind} attempt ${step.attempts} of ${step.maxAttempts} failed: ${message}; retrying at ${wakeAt.toISOString()}`,
  }
}

/** The run's log line for a step failed for good under `onError: degrade`. */
export function degradeLine(runId: number, step: StepRow, message: string): NewLog {
  return {
    runId,
    stepId: step.id,
    level: 'warn',
    message: `${step.kind} failed after ${step.attempts} attempt(s): ${message}; continuing degraded (onError: degrade)`,
  }
}
