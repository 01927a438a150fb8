/**
 * The engine: advances one run that this instance holds under a lease, step by
 * step, until the run sleeps, parks on a person, finishes, or the batch budget
 * is spent.
 *
 * Be careful about which parts can throw. Everything that talks to the database
 * may throw a DatabaseError; the caller (`Runner.advanceClaimed`) catches it per
 * run and releases the lease in `finally`. A step handler's throw is NOT an
 * engine error: it is a failed attempt and becomes a retry, a failed step or a
 * failed run here. The lease is never held across a wait: a run that sleeps or
 * parks is released with `wake_at` set to when it next needs attention.
 */
import { type Db, isDbUnavailable } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunListRow, RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow, StepSpec } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as versions from '../../sql/eventVersions.ts'
import type { RunStatus } from '../../sql/states.ts'
import { retryDelayMs } from './backoff.ts'
import type { Clock } from './clock.ts'
import { expandProgram, type Program } from './program.ts'
import type { StepRegistry } from './steps/registry.ts'
import { type StepContext, StepFailure, type StepOutcome, type StepSettings } from './steps/types.ts'
import { renderTemplate } from './template.ts'

/** Hooks the server wires to metrics; every one is optional. */
export interface RunnerObserver {
  stepFinished?(kind: string, outcome: 'completed' | 'retry' | 'failed' | 'sleep' | 'park' | 'skipped'): void
  claimConflict?(): void
  tickDuration?(ms: number): void
  tickError?(): void
  /** How late this tick started against its schedule, in ms (0 when on time). */
  tickLag?(ms: number): void
  /** Run history retention deleted these terminal runs (counts per status). */
  runsDeleted?(byStatus: Partial<Record<string, number>>): void
}

/** A run this instance holds a claim on, with what its steps' templates need. */
export type ClaimedRun = RunRow & { definitionTitle: string }

export interface EngineDeps {
  db: Db
  registry: StepRegistry
  clock: Clock
  owner: string
  leaseMs: number
  settings: StepSettings
  /** Steps executed per run per claim before the run is given back. @default 25 */
  maxStepsPerClaim?: number
  observer?: RunnerObserver
  /** True once the runner is stopping: finish the current step, take no next one. */
  stopping: () => boolean
  /** Aborted when a stopping runner's grace runs out: in-flight steps are cut short. */
  hardStop: AbortSignal
}

/**
 * Programs are immutable per version, so each version is expanded once. Keyed
 * by pool (one process may talk to several databases) and holding the promise,
 * so a cold batch of 1,000 runs of one version asks for it once, not 1,000 times.
 */
const expansionCache = new WeakMap<Db, Map<number, Promise<StepSpec[]>>>()

export function specsForVersion(db: Db, versionId: number): Promise<StepSpec[]> {
  let perDb = expansionCache.get(db)
  if (!perDb) {
    perDb = new Map()
    expansionCache.set(db, perDb)
  }
  const hit = perDb.get(versionId)
  if (hit) return hit
  const pending = (async () => {
    const version = await versions.getById(db, versionId)
    if (!version) throw new Error(`version ${versionId} is missing`)
    return expandProgram(version.program as Program)
  })()
  if (perDb.size > 1000) perDb.clear()
  perDb.set(versionId, pending)
  // A failed lookup (database down) must not be remembered.
  pending.catch(() => perDb?.delete(versionId))
  return pending
}

/** Expand the programs of runs in `starting` (idempotent) and move them to `running`. */
export async function expandStartingRuns(
  deps: EngineDeps,
  claimed: readonly RunRow[],
): Promise<RunListRow[]> {
  if (claimed.length === 0) return []
  const starting = claimed.filter((r) => r.status === 'starting')
  if (starting.length === 0)
    return runs.getByIds(
      deps.db,
      claimed.map((r) => r.id),
    )
  const items = await Promise.all(
    starting.map(async (r) => ({ runId: r.id, specs: await specsForVersion(deps.db, r.versionId) })),
  )
  await steps.expand(deps.db, items)
  // Group by first phase so each group is one guarded multi-row transition.
  const byPhase = new Map<string, { phase: string; ending: boolean; ids: number[] }>()
  for (const item of items) {
    const first = item.specs[0]
    const phase = first?.phase ?? ''
    const ending = first?.ending ?? false
    const key = JSON.stringify([ending, phase])
    const group = byPhase.get(key) ?? { phase, ending, ids: [] }
    group.ids.push(item.runId)
    byPhase.set(key, group)
  }
  for (const { phase, ending, ids } of byPhase.values()) {
    await runs.transitionMany(deps.db, ids, 'starting', 'running', { phase })
    // A program that opens with its ending phase is ending from its first step.
    if (ending) await runs.transitionMany(deps.db, ids, 'running', 'ending', { phase })
  }
  // Re-read (with the definition's title): a cancel may have landed between the
  // claim and the transition, or (after a lease expired) another instance may
  // have moved the run on; the batch path re-reads statuses before each step.
  const fresh = await runs.getByIds(
    deps.db,
    claimed.map((r) => r.id),
  )
  return fresh
}

type StepVerdict =
  /** The step is done (completed, skipped, degraded failure): take the next one. */
  | { next: true }
  /** The run must wait: release with this wake time (null = until a person acts). */
  | { next: false; wakeAt: Date | null }
  /** The run reached a terminal status or is no longer ours to advance. */
  | { next: false; stop: true }

/**
 * Advance one claimed run. Answers when the run next needs attention (`wakeAt`
 * for the release) or `stop` when it should be released as it is.
 */
export async function advanceRun(
  deps: EngineDeps,
  run: ClaimedRun,
): Promise<{ wakeAt: Date | null } | { stop: true }> {
  const budget = deps.maxStepsPerClaim ?? 25
  let phase = run.currentPhase
  for (let i = 0; i < budget; i++) {
    if (deps.stopping()) return { wakeAt: deps.clock.now() }
    // Re-read the status between steps: a pause or cancel from a person takes
    // effect before the next step, not at the next tick.
    const status = await runs.statusOf(deps.db, run.id)
    if (status !== 'running' && status !== 'ending') return { stop: true }
    const step = await steps.nextStep(deps.db, run.id)
    if (!step) {
      await runs.transition(deps.db, run.id, ['running', 'ending'], 'completed')
      return { stop: true }
    }
    if (step.phase !== phase) {
      if (step.ending && status === 'running') {
        await runs.transition(deps.db, run.id, 'running', 'ending', { phase: step.phase })
      } else {
        await runs.setPhase(deps.db, run.id, step.phase)
      }
      phase = step.phase
    }
    const verdict = await executeStep(deps, run, step, status)
    if ('stop' in verdict) return { stop: true }
    if (!verdict.next) return { wakeAt: verdict.wakeAt }
  }
  // Budget spent: give the run back due now, so other runs get a turn first.
  return { wakeAt: deps.clock.now() }
}

export function stepContext(
  deps: EngineDeps,
  run: RunRow,
  step: StepRow,
  title: string,
  resumed: boolean,
  signal: AbortSignal,
): StepContext {
  const vars = {
    run: { id: run.id, scope: run.scope, scheduledFor: run.scheduledFor.toISOString() },
    params: run.params,
    definition: { title },
  }
  return {
    run: {
      id: run.id,
      definitionId: run.definitionId,
      definitionTitle: title,
      scope: run.scope,
      scheduledFor: run.scheduledFor,
      timezone: run.timezone,
      params: run.params,
      rehearsal: run.rehearsal,
    },
    step: {
      id: step.id,
      seq: step.seq,
      phase: step.phase,
      kind: step.kind,
      attempt: step.attempts,
      maxAttempts: step.maxAttempts,
      timeoutMs: step.timeoutMs,
      wakeAt: step.wakeAt,
      startedAt: step.startedAt,
      resumed,
    },
    params: (renderTemplate(step.params ?? {}, vars) ?? {}) as Record<string, unknown>,
    idempotencyKey: `${run.id}-${step.id}`,
    now: () => deps.clock.now(),
    signal,
    settings: deps.settings,
    log: (level, message, data) =>
      logs.append(deps.db, { runId: run.id, stepId: step.id, level, message, data, actor: deps.owner }),
  }
}

/**
 * How long the engine keeps trying to write down the outcome of a step that
 * has already run, while the database cannot be reached. Until it is written
 * the step still looks "executing", and once its lease expires it runs again:
 * for a webhook, a second call. Any re-execution needs the database as well,
 * so waiting out a short outage here turns "the database blinked" into
 * "nothing ran twice" (the db-outage drill, test/drills/dbOutage.drill.ts).
 * Longer outages, and a runner whose stop grace ran out, fall back to
 * at-least-once under the same idempotency key.
 */
export const RECORD_RETRY_MS = 120_000

/**
 * Write a step's outcome, retrying (100 ms doubling to 1 s, real time) while the
 * database is unavailable, for up to {@link RECORD_RETRY_MS} or until the hard stop.
 * Any other error is thrown at once.
 */
export async function recordOutcome<T>(hardStop: AbortSignal, write: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + RECORD_RETRY_MS
  let delay = 100
  for (;;) {
    try {
      return await write()
    } catch (err) {
      if (!isDbUnavailable(err) || hardStop.aborted || Date.now() + delay > deadline) throw err
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer)
          hardStop.removeEventListener('abort', done)
          resolve()
        }
        const timer = setTimeout(done, delay)
        hardStop.addEventListener('abort', done, { once: true })
      })
      delay = Math.min(delay * 2, 1000)
    }
  }
}

/**
 * Run `fn` with the step's timeout: the signal aborts and the promise rejects at the deadline.
 * Exported for the batch path (batch.ts), whose inline steps are bound by the same timeout.
 */
export async function withTimeout<T>(
  timeoutMs: number,
  hardStop: AbortSignal,
  fn: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController()
  const onHardStop = () => controller.abort(new StepFailure('the runner is shutting down'))
  hardStop.addEventListener('abort', onHardStop, { once: true })
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new StepFailure(`timed out after ${timeoutMs} ms`)
      controller.abort(err)
      reject(err)
    }, timeoutMs)
  })
  const aborted = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true })
  })
  try {
    return await Promise.race([fn(controller.signal), deadline, aborted])
  } finally {
    clearTimeout(timer)
    hardStop.removeEventListener('abort', onHardStop)
  }
}

async function executeStep(
  deps: EngineDeps,
  run: ClaimedRun,
  step: StepRow,
  runStatus: RunStatus,
): Promise<StepVerdict> {
  const now = deps.clock.now()
  // A parked cue: only its timeout (or a person) moves it.
  if (step.status === 'running' && step.parked && (!step.wakeAt || step.wakeAt > now)) {
    return { next: false, wakeAt: step.wakeAt }
  }
  // Sleeping (a timer or a retry backoff) and not yet due.
  if (step.wakeAt && step.wakeAt > now) return { next: false, wakeAt: step.wakeAt }
  // Another owner is executing it under a live lease (only after a crash race).
  // A hint on this runner's clock; the begin below is guarded on the database's.
  if (step.claimExpiresAt && step.claimExpiresAt > now && step.claimedBy !== null) {
    return { next: false, wakeAt: step.claimExpiresAt }
  }

  const resumed = step.status === 'running' && step.wakeAt !== null
  const leaseUntil = new Date(now.getTime() + Math.max(deps.leaseMs, step.timeoutMs + 5000))
  // The run's lease must outlive the step, or another instance would take it mid-step.
  if (!(await runs.extendClaim(deps.db, run.id, deps.owner, leaseUntil, now)))
    return { next: false, stop: true }
  let entered: boolean
  try {
    entered = resumed
      ? await steps.resume(deps.db, step.id, deps.owner, leaseUntil, now)
      : await steps.begin(deps.db, step.id, deps.owner, leaseUntil, now)
  } catch (err) {
    // A database that went away mid-reply may have committed the begin and lost
    // only its answer: the step would then read as an attempt under way that
    // never ran, and count against its retries once its lease ran out. Nothing
    // ran, so once the database answers again the step is put back as it was.
    if (!resumed && isDbUnavailable(err))
      await recordOutcome(deps.hardStop, () => steps.takeBackBegin(deps.db, step, deps.owner))
    throw err
  }
  if (!entered) return { next: false, wakeAt: new Date(now.getTime() + 1000) }
  const attempt = resumed ? step.attempts : step.attempts + 1
  const current: StepRow = { ...step, attempts: attempt, status: 'running' }

  const kind = deps.registry.get(step.kind)
  const title = run.definitionTitle
  let outcome: StepOutcome
  try {
    if (!kind) throw new StepFailure(`unknown step kind "${step.kind}"`, { retryable: false })
    if (run.rehearsal && kind.sideEffects) {
      const ctx = stepContext(deps, run, current, title, resumed, deps.hardStop)
      const intent = kind.describe?.(ctx) ?? `${step.kind} ${JSON.stringify(ctx.params)}`
      await ctx.log('info', `rehearsal: would ${intent}`)
      outcome = { type: 'completed', result: { rehearsal: true } }
    } else {
      outcome = await withTimeout(step.timeoutMs, deps.hardStop, (signal) =>
        kind.execute(stepContext(deps, run, current, title, resumed, signal)),
      )
    }
  } catch (err) {
    return handleFailure(deps, run, current, err, runStatus)
  }

  switch (outcome.type) {
    case 'completed': {
      const done = await recordOutcome(deps.hardStop, () =>
        steps.complete(deps.db, step.id, outcome.result ?? null),
      )
      deps.observer?.stepFinished?.(step.kind, 'completed')
      // A retry backoff degraded the run; success clears it unless a step failed for good.
      if (done && attempt > 1 && step.lastError) await restoreHealth(deps, run.id)
      return { next: true }
    }
    case 'sleep':
      await recordOutcome(deps.hardStop, () => steps.sleep(deps.db, step.id, outcome.until))
      deps.observer?.stepFinished?.(step.kind, 'sleep')
      return { next: false, wakeAt: outcome.until }
    case 'park': {
      await recordOutcome(deps.hardStop, () => steps.park(deps.db, step.id, outcome.until))
      deps.observer?.stepFinished?.(step.kind, 'park')
      const prompt = typeof step.params?.prompt === 'string' ? `: ${step.params.prompt}` : ''
      await logs.append(deps.db, {
        runId: run.id,
        stepId: step.id,
        level: 'info',
        message: `waiting on a person${prompt}`,
      })
      return { next: false, wakeAt: outcome.until }
    }
  }
}

async function restoreHealth(deps: EngineDeps, runId: number): Promise<void> {
  const all = await steps.listForRun(deps.db, runId)
  const stillBad = all.some(
    (s) => s.status === 'failed' || (s.status === 'pending' && s.attempts > 0 && s.lastError),
  )
  if (!stillBad) await runs.setHealth(deps.db, runId, 'ok')
}

function describeError(err: unknown): string {
  if (err instanceof Error) return err.message || err.name
  return String(err)
}

export async function handleFailure(
  deps: EngineDeps,
  run: RunRow,
  step: StepRow,
  err: unknown,
  runStatus: RunStatus,
): Promise<StepVerdict> {
  const message = describeError(err).slice(0, 900)
  const retryable = !(err instanceof StepFailure) || err.retryable
  const now = deps.clock.now()
  if (deps.hardStop.aborted) {
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
  if (retryable && step.attempts < step.maxAttempts) {
    const wakeAt = new Date(now.getTime() + retryDelayMs(step.attempts, step.backoffMs))
    if (!(await recordOutcome(deps.hardStop, () => steps.scheduleRetry(deps.db, step.id, message, wakeAt))))
      return { next: true }
    await runs.setHealth(deps.db, run.id, 'degraded')
    await logs.append(deps.db, {
      runId: run.id,
      stepId: step.id,
      level: 'warn',
      message: `${step.kind} attempt ${step.attempts} of ${step.maxAttempts} failed: ${message}; retrying at ${wakeAt.toISOString()}`,
    })
    deps.observer?.stepFinished?.(step.kind, 'retry')
    return { next: false, wakeAt }
  }
  if (step.onError === 'degrade') {
    const failed = await recordOutcome(deps.hardStop, () => steps.fail(deps.db, step.id, message))
    deps.observer?.stepFinished?.(step.kind, 'failed')
    if (!failed) return { next: true } // a person skipped or cancelled it meanwhile
    await runs.setHealth(deps.db, run.id, 'degraded')
    await logs.append(deps.db, {
      runId: run.id,
      stepId: step.id,
      level: 'warn',
      message: `${step.kind} failed after ${step.attempts} attempt(s): ${message}; continuing degraded (onError: degrade)`,
    })
    return { next: true }
  }
  const error = `step ${step.seq} (${step.kind}) failed after ${step.attempts} attempt(s): ${message}`
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
