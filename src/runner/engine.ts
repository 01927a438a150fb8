/**
 * The engine: advances one run that this instance holds under a lease, step by
 * step, until the run sleeps, parks on a person, finishes, or the batch budget
 * is spent.
 *
 * Be careful about which parts can throw. Everything that talks to the database
 * may throw a DatabaseError; the caller (`Runner.advanceClaimed`) catches it per
 * run and releases the lease in `finally`. A step handler's throw is NOT an
 * engine error: it is a failed attempt and becomes a retry, a failed step or a
 * failed run (decided in executor/decide.ts, written by executor/failure.ts).
 * The lease is never held across a wait: a run that sleeps or parks is
 * released with `wake_at` set to when it next needs attention.
 */
import { type Db, isDbUnavailable } from '../../sql/db.ts'
import type { NewLog } from '../../sql/eventRunLogs.ts'
import type { RunListRow, RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow, StepSpec } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as versions from '../../sql/eventVersions.ts'
import type { RunStatus } from '../../sql/states.ts'
import { type AttemptResult, attempt } from './executor/attempt.ts'
import { templateVars } from './executor/context.ts'
import { isAdvancing, isResume, notYet, phaseMove, type StepVerdict } from './executor/decide.ts'
import { handleFailure } from './executor/failure.ts'
import { immediateWriter, recordOutcome, type StepWriter } from './executor/writer.ts'
import { expandProgram, type Program } from './program.ts'
import { renderTemplate } from './template.ts'
import type { ClaimedRun, EngineDeps, RunAnswer } from './types.ts'

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
    // The run enters its first step's phase as it would any other (and `ending` with it).
    const move = phaseMove(item.specs[0] ?? { phase: '', ending: false }, 'running', null)
    const phase = move?.phase ?? ''
    const ending = move?.to === 'ending'
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

/**
 * Advance one claimed run. Answers when the run next needs attention (`wakeAt`
 * for the release) or `stop` when it should be released as it is.
 */
export async function advanceRun(deps: EngineDeps, run: ClaimedRun): Promise<RunAnswer> {
  const budget = deps.maxStepsPerClaim ?? 25
  const writer = immediateWriter(deps.db, deps.hardStop)
  let phase = run.currentPhase
  for (let i = 0; i < budget; i++) {
    if (deps.stopping()) return { wakeAt: deps.clock.now() }
    // Re-read the status between steps: a pause or cancel from a person takes
    // effect before the next step, not at the next tick.
    const status = await runs.statusOf(deps.db, run.id)
    if (!isAdvancing(status)) return { stop: true }
    const step = await steps.nextStep(deps.db, run.id)
    if (!step) {
      await writer.finishRun(run.id)
      return { stop: true }
    }
    const move = phaseMove(step, status, phase)
    if (move) {
      await writer.movePhase(run.id, move)
      phase = step.phase
    }
    const verdict = await executeStep(deps, writer, run, step, status)
    if ('stop' in verdict) return { stop: true }
    if (!verdict.next) return { wakeAt: verdict.wakeAt }
  }
  // Budget spent: give the run back due now, so other runs get a turn first.
  return { wakeAt: deps.clock.now() }
}

async function executeStep(
  deps: EngineDeps,
  writer: StepWriter,
  run: ClaimedRun,
  step: StepRow,
  runStatus: RunStatus,
): Promise<StepVerdict> {
  const now = deps.clock.now()
  const wait = notYet(step, now)
  if (wait) return { next: false, wakeAt: wait.wakeAt }

  const resumed = isResume(step)
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
  const attempts = resumed ? step.attempts : step.attempts + 1
  const current: StepRow = { ...step, attempts, status: 'running' }

  const result = await attempt(deps, { run, step: current, resumed, lines: writer })
  return concludeStep(deps, writer, run, current, result, runStatus)
}

/**
 * Write what an executed attempt of `step` (as it was while executing) came
 * to, and answer what its run does next. Shared by the per-run engine and a
 * batch's stragglers (batch.ts), which finish alone.
 */
export async function concludeStep(
  deps: EngineDeps,
  writer: StepWriter,
  run: ClaimedRun,
  step: StepRow,
  result: AttemptResult,
  runStatus: RunStatus,
): Promise<StepVerdict> {
  if (!result.ok) return handleFailure(deps, run, step, result.failure, runStatus)
  const { write } = result
  switch (write.write) {
    case 'complete': {
      const done = await writer.complete(step.id, write.result)
      deps.observer?.stepFinished?.(step.kind, 'completed')
      // A retry backoff degraded the run; success clears it unless a step failed for good.
      if (done && step.attempts > 1 && step.lastError) await runs.restoreHealthOf(deps.db, [run.id])
      return { next: true }
    }
    case 'sleep':
      await recordOutcome(deps.hardStop, () => steps.sleep(deps.db, step.id, write.until))
      deps.observer?.stepFinished?.(step.kind, 'sleep')
      return { next: false, wakeAt: write.until }
    case 'park': {
      await recordOutcome(deps.hardStop, () => steps.park(deps.db, step.id, write.until))
      deps.observer?.stepFinished?.(step.kind, 'park')
      await writer.log(parkedLine(run, step))
      return { next: false, wakeAt: write.until }
    }
  }
}

/** The log line a run gets when a step parks it on a person, its prompt rendered as the step saw it. */
export function parkedLine(run: ClaimedRun, step: Pick<StepRow, 'id' | 'params'>): NewLog {
  const raw = step.params?.prompt
  const vars = templateVars(run, { title: run.definitionTitle, slug: run.definitionSlug })
  const prompt = typeof raw === 'string' ? `: ${String(renderTemplate(raw, vars))}` : ''
  return { runId: run.id, stepId: step.id, level: 'info', message: `waiting on a person${prompt}` }
}
