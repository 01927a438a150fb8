/**
 * Run controls: what people and scripts do to runs (start, pause, resume,
 * cancel, resolve a cue, skip a step). Each is a guarded transition that answers
 * whether it applied, and each writes its actor and outcome to the run's log.
 * `applied: false` is not an error: the guard did not match (another person, or
 * the runner, got there first) and the caller gets the current row.
 */

import type { Db, Queryable } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { NON_TERMINAL } from '../../sql/states.ts'
import { badInput, conflict, notFound } from '../errors.ts'
import type { Clock } from '../runner/clock.ts'
import type { RunHandOff } from '../runner/handOff.ts'
import { newRun } from '../runner/newRun.ts'
import { speedProblem } from '../runner/speed.ts'
import type { RunQuota } from '../runQuota.ts'

export interface ControlDeps {
  db: Db
  clock: Clock
  /** Wake the local runner so a change is acted on now, not at the next tick. */
  nudge?: () => void
  /** The runner in this process, to which a cue's answer hands its run (src/runner/handOff.ts). */
  handOff?: RunHandOff
  /** Largest `params` accepted, in bytes of JSON (MAX_PARAMS_BYTES). @default 65536 */
  maxParamsBytes?: number
  /** Runs per principal per minute (MAX_RUNS_PER_MINUTE); none in library use. */
  quota?: RunQuota
}

/** The default of MAX_PARAMS_BYTES. */
export const DEFAULT_MAX_PARAMS_BYTES = 64 * 1024

export interface TransitionAnswer {
  applied: boolean
  run: RunListRow
}

export interface StepAnswer {
  applied: boolean
  step: StepRow
}

/** Options of {@link startRun}. */
export interface StartRunInput {
  definitionId: number
  /** @default '' */
  scope?: string
  /** When to start; omitted = now. With `at` the call is idempotent on (definition, scope, at). */
  at?: Date | null
  /** Values for `{{params.NAME}}` templates: a JSON object. */
  params?: unknown
  /** Walk the program without side effects and without taking the concurrency key. @default false */
  rehearsal?: boolean
  /** A rehearsal's speed, 1..3600 (speed.ts). @default 1 */
  speed?: number
  actor: string
}

async function mustGetRun(db: Db, id: number): Promise<RunListRow> {
  const run = await runs.getById(db, id)
  if (!run) throw notFound('run', id)
  return run
}

/** Start a run of a definition now or at `at`; answers the run (existing when the occurrence existed). */
export async function startRun(deps: ControlDeps, input: StartRunInput): Promise<RunListRow> {
  const scope = input.scope ?? ''
  if (scope.length > 191) throw badInput('scope must be at most 191 characters.')
  const params = input.params ?? null
  if (params !== null && (typeof params !== 'object' || Array.isArray(params))) {
    throw badInput('params must be a JSON object, e.g. {"room": "A"}.')
  }
  const maxParams = deps.maxParamsBytes ?? DEFAULT_MAX_PARAMS_BYTES
  // Bytes as stored (UTF-8 JSON): each run keeps its params, and its first log line repeats them.
  const paramsBytes = params === null ? 0 : Buffer.byteLength(JSON.stringify(params))
  if (paramsBytes > maxParams) {
    throw badInput(
      `params is ${paramsBytes} bytes of JSON; at most ${maxParams} (MAX_PARAMS_BYTES). Pass a reference (an id, a URL) instead of the data.`,
    )
  }
  if (input.at && Number.isNaN(input.at.getTime())) throw badInput('at must be a valid ISO-8601 date-time.')
  const speed = input.speed ?? 1
  const badSpeed = speedProblem(speed, input.rehearsal === true)
  if (badSpeed) throw badInput(badSpeed)
  const def = await definitions.getById(deps.db, input.definitionId)
  if (!def) throw notFound('definition', input.definitionId)
  const archived = () => conflict(`Definition "${def.slug}" is archived; set it ACTIVE to start runs.`)
  if (def.state === 'archived') throw archived()
  if (def.currentVersionId === null) throw conflict(`Definition "${def.slug}" has no published version.`)
  // Counted before the insert (an idempotent repeat counts too): a refusal costs no write.
  await deps.quota?.take(input.actor, 1)
  const scheduledFor = input.at ?? deps.clock.now()
  const rehearsal = input.rehearsal === true
  const typedParams = params as Record<string, unknown> | null
  const run = newRun(def, { scope, scheduledFor, params: typedParams, rehearsal, startedBy: input.actor })
  // After writing the definition's guard, so an archive cannot slip in between
  // the state check above and the insert (see eventDefinitions.setState). Safe
  // to repeat: a retry after losing a conflict finds the run if the winner made
  // it, and `id` is read only from the attempt that committed.
  const id = await deps.db.transaction(
    async (tx) => {
      if ((await definitions.lockForNewRuns(tx, def.id)) === 'archived') throw archived()
      const made = await runs.materialise(tx, run)
      if (made !== null && speed !== 1) await runs.setSpeed(tx, made, speed)
      return made
    },
    { retryable: true },
  )
  if (id !== null) {
    await logs.append(deps.db, {
      runId: id,
      message: `${rehearsal ? 'rehearsal' : 'run'} requested by ${input.actor} for ${scheduledFor.toISOString()}`,
      actor: input.actor,
      data: { scope, params: typedParams, rehearsal, ...(speed !== 1 && { speed }) },
    })
    deps.nudge?.()
    return mustGetRun(deps.db, id)
  }
  const existing = await runs.findOccurrence(deps.db, def.id, scope, scheduledFor, rehearsal)
  if (!existing) throw conflict('The run was created and removed concurrently; retry.')
  // Idempotent, but still an action someone took: record it on the run.
  await logs.append(deps.db, {
    runId: existing.id,
    message: `${rehearsal ? 'rehearsal' : 'run'} requested again by ${input.actor}: it already exists`,
    actor: input.actor,
    data: { scope, rehearsal, applied: false },
  })
  return existing
}

async function recordControl(
  deps: ControlDeps,
  runId: number,
  actor: string,
  action: string,
  applied: boolean,
  current: RunListRow,
  detail?: Record<string, unknown>,
): Promise<void> {
  await logs.append(deps.db, {
    runId,
    level: applied ? 'info' : 'warn',
    message: applied
      ? `${action} by ${actor}`
      : `${action} by ${actor} not applied: the run is ${current.status.toUpperCase()}`,
    actor,
    data: { action, applied, ...detail },
  })
}

/**
 * `running | ending → paused`: the runner takes no further step until resumed,
 * and the show's time is held from this instant (pauseHold.ts).
 */
export async function pauseRun(deps: ControlDeps, id: number, actor: string): Promise<TransitionAnswer> {
  await mustGetRun(deps.db, id)
  // A run whose last step is done is the runner's to complete: the pause loses.
  const applied = await runs.transition(deps.db, id, ['running', 'ending'], 'paused', {
    onlyWithStepsLeft: true,
    pausedAt: deps.clock.now(),
  })
  const run = await mustGetRun(deps.db, id)
  await recordControl(deps, id, actor, 'pause', applied, run)
  return { applied, run }
}

/**
 * `paused → running`, due at once; its current wait and cue continue with the
 * time they had left at the pause (their timers move later by the pause's
 * length in the same transaction, so the shift and the move happen together
 * or not at all).
 */
export async function resumeRun(deps: ControlDeps, id: number, actor: string): Promise<TransitionAnswer> {
  await mustGetRun(deps.db, id)
  const now = deps.clock.now()
  const applied = await deps.db.transaction(
    async (tx) => {
      if ((await runs.holdPausedTime(tx, [id], now)).length === 0) return false
      return runs.transition(tx, id, 'paused', 'running', { wakeAt: now })
    },
    { retryable: true },
  )
  const run = await mustGetRun(deps.db, id)
  await recordControl(deps, id, actor, 'resume', applied, run)
  if (applied) deps.nudge?.()
  return { applied, run }
}

/** Any non-terminal status `→ cancelled`: unfinished steps are cancelled and the key is released. */
export async function cancelRun(
  deps: ControlDeps,
  id: number,
  actor: string,
  reason: string | null = null,
): Promise<TransitionAnswer> {
  if (reason !== null && reason.length > 500) throw badInput('reason must be at most 500 characters.')
  await mustGetRun(deps.db, id)
  // A run whose last step is done is the runner's to complete: the cancel loses.
  const applied = await runs.endWithSteps(deps.db, id, NON_TERMINAL, 'cancelled', {
    error: `cancelled by ${actor}${reason ? `: ${reason}` : ''}`,
    onlyWithStepsLeft: true,
  })
  const run = await mustGetRun(deps.db, id)
  await recordControl(deps, id, actor, 'cancel', applied, run, { reason })
  if (applied) deps.nudge?.()
  return { applied, run }
}

async function mustGetStep(db: Queryable, id: number): Promise<StepRow> {
  const step = await steps.getById(db, id)
  if (!step) throw notFound('step', id)
  return step
}

async function stepControl(
  deps: ControlDeps,
  stepId: number,
  actor: string,
  action: 'resolve cue' | 'skip step',
  text: string | null,
  apply: (db: Queryable, step: StepRow) => Promise<boolean>,
): Promise<StepAnswer> {
  if (text !== null && text.length > 1000) throw badInput('note and reason must be at most 1000 characters.')
  // One transaction on one connection: an instance too busy to take the answer
  // refuses it (BUSY) before anything is applied, never after. As separate
  // statements, a full pool queue could refuse the log line or the wake-up of
  // a cue already answered, and the person was told BUSY for an answer that
  // counted (their retry then read applied: false). Read committed, so the
  // step answered back is the current row, not the snapshot of the first read.
  const answer = await deps.db.transaction(
    async (tx) => {
      const before = await mustGetStep(tx, stepId)
      const applied = await apply(tx, before)
      const step = await mustGetStep(tx, stepId)
      await logs.append(tx, {
        runId: step.runId,
        stepId,
        level: applied ? 'info' : 'warn',
        message: applied
          ? `${action} ${stepId} (step ${step.seq + 1} of the run, ${step.kind}) by ${actor}${text ? `: ${text}` : ''}`
          : `${action} ${stepId} (step ${step.seq + 1} of the run) by ${actor} not applied: the step is ${step.status.toUpperCase()}${step.parked ? ' (parked)' : ''}`,
        actor,
        data: { action, applied, text },
      })
      // The runner compares wake_at with its clock, so wake by that clock, not the database's.
      if (applied) await runs.wakeNow(tx, step.runId, deps.clock.now())
      return { applied, step }
    },
    { isolation: 'READ COMMITTED', retryable: true },
  )
  if (answer.applied) deps.nudge?.()
  return answer
}

/** A person answers a parked cue: the step completes and the run continues at once. */
export function resolveCue(
  deps: ControlDeps,
  stepId: number,
  actor: string,
  note: string | null = null,
): Promise<StepAnswer> {
  return stepControl(deps, stepId, actor, 'resolve cue', note, (db, step) =>
    steps.resolveParked(db, step.id, { resolvedBy: actor, note }),
  )
}

/** A person skips a step that has not finished; the run continues with the next one. */
export function skipStep(
  deps: ControlDeps,
  stepId: number,
  actor: string,
  reason: string | null = null,
): Promise<StepAnswer> {
  return stepControl(deps, stepId, actor, 'skip step', reason, (db, step) => steps.skip(db, step.id, reason))
}
