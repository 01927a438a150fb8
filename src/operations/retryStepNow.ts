/**
 * `retryStepNow`: a step waiting out a retry backoff (a webhook whose receiver
 * failed, with attempts left) gets its next attempt now instead of at its
 * scheduled instant. This only moves the step's wake time to now and wakes
 * its run; the runner makes the attempt on its normal path (executor/attempt.ts,
 * the one place a step executes), counted against the step's attempts, with
 * the same idempotency key. Refused (CONFLICT, with `extensions.reason`) for a
 * step that is not in backoff or whose run is not running; the refusal, like
 * the retry, is in the run's log and the audit table.
 */
import * as audit from '../../sql/auditLog.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { AppError, ERROR_CODES, notFound } from '../errors.ts'
import type { ControlDeps, StepAnswer } from './runControls.ts'

/** Why a step cannot be retried now: `extensions.reason` of the CONFLICT. */
export type RetryNowRefusal = 'NOT_IN_BACKOFF' | 'RUN_NOT_RUNNING'

/** True when `step` is waiting for its next attempt after a failed one, and that attempt is still ahead. */
export function inBackoff(step: Pick<StepRow, 'status' | 'attempts' | 'wakeAt'>, now: Date): boolean {
  return (
    step.status === 'pending' &&
    step.attempts > 0 &&
    step.wakeAt !== null &&
    step.wakeAt.getTime() > now.getTime()
  )
}

function notInBackoff(step: StepRow, now: Date): string {
  const what = `Step ${step.id} (step ${step.seq + 1} of run ${step.runId}, ${step.kind})`
  if (step.status === 'pending' && step.attempts > 0 && step.wakeAt !== null && step.wakeAt <= now)
    return `${what} is already due for its next attempt; the runner is about to make it.`
  const state = `${step.status.toUpperCase()}${step.parked ? ', parked on a person' : ''}`
  return `${what} is ${state}, not waiting for a retry: only a step in retry backoff (failed, with attempts left) can be retried now.`
}

export async function retryStepNow(deps: ControlDeps, stepId: number, actor: string): Promise<StepAnswer> {
  const before = await steps.getById(deps.db, stepId)
  if (!before) throw notFound('step', stepId)
  const now = deps.clock.now()
  const run = await runs.getById(deps.db, before.runId)
  let refusal: { reason: RetryNowRefusal; message: string } | null = null
  if (!inBackoff(before, now)) refusal = { reason: 'NOT_IN_BACKOFF', message: notInBackoff(before, now) }
  else if (run && run.status !== 'running' && run.status !== 'ending')
    refusal = {
      reason: 'RUN_NOT_RUNNING',
      message: `Run ${run.id} is ${run.status.toUpperCase()}${run.status === 'paused' ? '; resume it first (its steps wait while it is paused)' : ''}.`,
    }
  if (refusal) {
    await record(deps, before, actor, false, refusal.message)
    throw new AppError(ERROR_CODES.CONFLICT, refusal.message, { extensions: { reason: refusal.reason } })
  }
  const answer = await deps.db.transaction(
    async (tx) => {
      // The runner compares wake_at with its clock, so both are set from that clock.
      const applied = await steps.retryNow(tx, stepId, now)
      if (applied) await runs.wakeNow(tx, before.runId, now)
      const step = (await steps.getById(tx, stepId)) ?? before
      return { applied, step }
    },
    { isolation: 'READ COMMITTED', retryable: true },
  )
  await record(deps, answer.step, actor, answer.applied, answer.applied ? null : 'the step moved on first')
  if (answer.applied) deps.nudge?.()
  return answer
}

async function record(
  deps: ControlDeps,
  step: StepRow,
  actor: string,
  applied: boolean,
  why: string | null,
): Promise<void> {
  const label = `retry step now ${step.id} (step ${step.seq + 1} of the run, ${step.kind})`
  await logs.append(deps.db, {
    runId: step.runId,
    stepId: step.id,
    level: applied ? 'info' : 'warn',
    message: applied
      ? `${label} by ${actor}: attempt ${step.attempts + 1} of ${step.maxAttempts} now`
      : `${label} by ${actor} not applied: ${why}`,
    actor,
    data: { action: 'retry step now', applied },
  })
  await audit.record(deps.db, {
    actor,
    action: 'retryStepNow',
    targetType: 'step',
    targetId: String(step.id),
    outcome: applied ? 'ok' : 'refused',
    detail: { runId: String(step.runId), ...(why ? { why: why.slice(0, 1000) } : {}) },
  })
}
