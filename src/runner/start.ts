/**
 * Starting due key-less runs, a batch per short transaction.
 *
 * One transaction locks the batch (`FOR UPDATE SKIP LOCKED`, so two instances
 * never wait on each other's batch), expands each run's program into step rows,
 * runs the leading *pure* steps (`core.log`: computation and a log line, see
 * `StepKind.pure`), and moves each run out of `scheduled` with a guarded UPDATE:
 * to `completed` when every step ran, otherwise to `running`/`ending` under this
 * instance's lease, to be advanced (advance.ts) after the commit. Everything the
 * start did commits together or not at all, so a crash or a lost connection
 * leaves the run `scheduled`, to be started again whole; pure steps change
 * nothing outside that transaction, so running one twice that way is harmless.
 *
 * The cost is what makes a single-step run cheap: per batch, one locking read,
 * the step rows (one `INSERT … SELECT` per step the batch's runs share, see
 * `insertStarted`), one INSERT of log lines and one UPDATE per outcome group,
 * instead of a claim, a status move, a step begin and end and a release per run.
 *
 * The locks are the claim, and they last only as long as the transaction: no
 * transaction outlives the start, and nothing in it waits on a person or the
 * network. A person's cancel or pause of a run in the batch waits for the
 * commit (milliseconds), then finds the run `completed` (applied: false) or
 * `running`, where it lands before the run's next step.
 *
 * The pure steps themselves are attempted by startPure.ts, which writes nothing.
 *
 * Runs with a concurrency key are not started here: each needs its key lock,
 * taken with its claim (`claimStart`).
 */
import { DatabaseError, DB_ERRNO, isDbErrno, isDbUnavailable, type Queryable } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { NewLog } from '../../sql/eventRunLogs.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { DuePlace, LockedRun, StartedAs } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StartedStep, StepSpec } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { startedAs } from './executor/decide.ts'
import { specsForVersion } from './expand.ts'
import { withinGrace } from './grace.ts'
import { type Plan, runLeadingPure } from './startPure.ts'
import { StepFailure } from './steps/types.ts'
import type { ClaimedRun, EngineDeps } from './types.ts'

/** What one start transaction did. */
export interface StartBatchOutcome {
  /** Runs the batch locked, including any left `scheduled` because their grace window had passed. */
  locked: number
  /** Runs started (moved out of `scheduled`). */
  started: number
  /** Runs that also finished in the same transaction. */
  completed: number
  /** Runs claimed by this instance for the rest of their program, to advance now. */
  handOff: ClaimedRun[]
  /** Runs that could not be started at all and failed, with the reason (for the process log). */
  failed: { runId: number; reason: string }[]
}

/**
 * Start up to `limit` due key-less runs in one transaction. `token` marks the
 * claims of the runs handed off (unique per call).
 *
 * A batch the database refuses for a reason that waiting will not cure (a
 * value it rejects, a program that cannot be expanded) is started again one
 * run per transaction, so the run at fault is found and *fails* with the reason
 * as its `last_error`, and the others start. Without that, one such run would
 * stop every run behind it in the due index from ever starting.
 */
export async function startKeylessBatch(
  deps: EngineDeps,
  token: string,
  limit: number,
  opts: {
    /**
     * Told how many runs the batch locked, and the last of them in the due
     * order, as soon as it knows, before it starts them: a full batch means
     * more are due, so a caller can start the next batch alongside this one
     * instead of after it, and past its runs.
     */
    onLocked?: (count: number, last: DuePlace | undefined) => void
    /** Lock only runs past this place in the due order (see `lockDueToStart`). */
    after?: DuePlace
  } = {},
): Promise<StartBatchOutcome> {
  const { after } = opts
  try {
    return await startOnce(deps, token, limit, [], after, opts.onLocked)
  } catch (err) {
    // A runner cut short by its stop grace is not a run's fault: nothing fails for it.
    if (isTransient(err) || deps.hardStop.aborted) throw err
    const total: StartBatchOutcome = { locked: 0, started: 0, completed: 0, handOff: [], failed: [] }
    for (let i = 0; i < limit; i++) {
      const seen: number[] = []
      try {
        const one = await startOnce(deps, `${token}:${i}`, 1, seen, after)
        // Nothing due, or a run past its grace at the head (the missed sweep's, next tick): stop here.
        if (one.locked === 0 || one.started === 0) break
        total.locked += one.locked
        total.started += one.started
        total.completed += one.completed
        total.handOff.push(...one.handOff)
      } catch (oneErr) {
        const runId = seen[0]
        // Only what is the run's own fault fails it: a value the database refuses,
        // a pure step that hangs, a program that cannot be expanded. Anything
        // else is a fault of this code, and failing every run for it would be
        // worse than leaving them scheduled (a fixed runner inside their grace
        // window still starts them): the tick fails and says so instead.
        const runsOwnFault =
          oneErr instanceof DatabaseError || oneErr instanceof StepFailure || oneErr instanceof StartRefused
        if (!runsOwnFault || isTransient(oneErr) || deps.hardStop.aborted || runId === undefined) throw oneErr
        const reason = await failStart(deps, runId, oneErr)
        if (reason !== null) total.failed.push({ runId, reason })
        total.locked++
      }
    }
    return total
  }
}

/**
 * Start transactions per pass, at most: a backlog drains over a few ticks
 * instead of one pass that starves the claims of runs already in flight.
 */
const MAX_START_BATCHES_PER_TICK = 10

/**
 * Start due key-less runs, a batch per transaction ({@link startKeylessBatch}),
 * until none is left or the pass has started {@link MAX_START_BATCHES_PER_TICK}
 * batches. Answers the runs claimed for the rest of their program, and whether
 * a backlog is left (the caller ticks again at once).
 */
export async function startKeylessDue(
  deps: EngineDeps,
  pass: {
    token: string
    batchSize: number
    /** Start transactions in flight at once while a backlog drains. */
    concurrency: number
    /** A run could not be started at all and failed. */
    onFailed: (runId: number, reason: string) => void
    /** Told of the runs each batch left claimed, as it commits: the caller holds them and gives them back. */
    hold: (runs: readonly ClaimedRun[]) => void
  },
): Promise<{ handOff: ClaimedRun[]; backlog: boolean }> {
  const handOff: ClaimedRun[] = []
  let batches = 0
  let drained = false
  // How far the pass's batches have locked in the due order: each batch walks
  // on from there rather than over the runs started before it (see `lockDueToStart`).
  let reached: DuePlace | undefined
  const startOne = async (onLocked?: (count: number) => void) => {
    const batch = await startKeylessBatch(deps, `${pass.token}:${batches++}`, pass.batchSize, {
      after: reached,
      onLocked: (count, last) => {
        if (last && (!reached || placeOrder(last, reached) > 0)) reached = last
        onLocked?.(count)
      },
    })
    handOff.push(...batch.handOff)
    pass.hold(batch.handOff)
    for (const { runId, reason } of batch.failed) pass.onFailed(runId, reason)
    // A short batch means the due index is drained (or holds only runs past their grace).
    if (batch.locked < pass.batchSize || batch.started === 0) drained = true
  }
  const more = () => !drained && !deps.stopping() && batches < MAX_START_BATCHES_PER_TICK
  const keepStarting = async () => {
    while (more()) await startOne()
  }
  // One batch first. Only a backlog (its locking read came back full) brings
  // in the other `concurrency - 1` workers, so one batch's statements
  // overlap another's work. They join as soon as the first batch has locked
  // its runs rather than once it commits, which would run the first batch of
  // every backlog alone.
  const helpers: Promise<void>[] = []
  const joinHelpers = (locked: number) => {
    if (locked < pass.batchSize || helpers.length > 0 || !more()) return
    for (let i = 1; i < pass.concurrency; i++) helpers.push(keepStarting())
  }
  const first = (async () => {
    await startOne(joinHelpers)
    await keepStarting()
  })()
  // allSettled: a failed worker must not leave the others still starting runs
  // after the caller gave back what the committed batches hold.
  const settled = [...(await Promise.allSettled([first])), ...(await Promise.allSettled(helpers))]
  const failed = settled.find((w) => w.status === 'rejected')
  if (failed) throw failed.reason
  return { handOff, backlog: !drained }
}

/** Compare two places in the due order: `scheduled_for`, then id. */
function placeOrder(a: DuePlace, b: DuePlace): number {
  return a.scheduledFor.getTime() - b.scheduledFor.getTime() || a.id - b.id
}

/** A run that cannot be started for a reason of its own (its program), as opposed to a fault of the runner. */
class StartRefused extends Error {
  override readonly name = 'StartRefused'
}

/** Errors that another try may not meet: the database is away, or lost a lock race. */
function isTransient(err: unknown): boolean {
  return (
    isDbUnavailable(err) ||
    isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK) ||
    isDbErrno(err, DB_ERRNO.LOCK_WAIT_TIMEOUT)
  )
}

/**
 * One start transaction, run again whole when it loses a conflict (an InnoDB
 * deadlock, a lock wait timeout, or, on Galera, another node's start of the same
 * runs winning certification at COMMIT): safe, because everything it does (pure
 * steps included) is inside it, and its outcome is read only once it committed.
 */
async function startOnce(
  deps: EngineDeps,
  token: string,
  limit: number,
  seen: number[],
  after?: DuePlace,
  onLocked?: (count: number, last: DuePlace | undefined) => void,
): Promise<StartBatchOutcome> {
  const { outcome, finished } = await deps.db.transaction(
    (tx) => startInTransaction(deps, tx, token, limit, seen, after, onLocked),
    { isolation: 'READ COMMITTED', retryable: true },
  )
  for (const kind of finished) deps.observer?.stepFinished?.(kind, 'completed')
  return outcome
}

/** A run that cannot be started at all fails, saying why, instead of blocking the runs behind it. */
async function failStart(deps: EngineDeps, runId: number, err: unknown): Promise<string | null> {
  const reason = err instanceof Error ? err.message : String(err)
  const moved = await runs.transition(deps.db, runId, 'scheduled', 'failed', {
    error: `could not be started: ${reason}`,
  })
  if (!moved) return null
  await logs.append(deps.db, {
    runId,
    level: 'error',
    message: `could not be started: ${reason}`,
    actor: deps.owner,
  })
  return reason
}

async function startInTransaction(
  deps: EngineDeps,
  tx: Queryable,
  token: string,
  limit: number,
  seen: number[],
  after: DuePlace | undefined,
  onLocked?: (count: number, last: DuePlace | undefined) => void,
): Promise<{ outcome: StartBatchOutcome; finished: string[] }> {
  const empty = { outcome: { locked: 0, started: 0, completed: 0, handOff: [], failed: [] }, finished: [] }
  if (deps.stopping()) return empty
  const now = deps.clock.now()
  const budget = deps.maxStepsPerClaim ?? 25
  const locked = await runs.lockDueToStart(tx, now, limit, after)
  const last = locked.at(-1)
  onLocked?.(locked.length, last ? { scheduledFor: last.scheduledFor, id: last.id } : undefined)
  if (locked.length === 0) return empty
  // The lock is the start's claim: the runs' started_at (the database's clock, as every stamp).
  const startedAt = (locked[0] as LockedRun).lockedAt
  // What this attempt locked (a deadlock retry may lock other runs).
  seen.splice(0, seen.length, ...locked.map((r) => r.id))

  // A plain (non-locking) read: READ COMMITTED sees the definitions as committed now.
  const defs = new Map(
    (await definitions.getByIds(tx, [...new Set(locked.map((r) => r.definitionId))])).map((d) => [d.id, d]),
  )
  // Past its grace window (`missed_at`, the instant the missed sweep and the
  // keyed claim also compare; NULL for a grace-exempt run) a run is `missed`,
  // not started; the sweep takes it. A run the schedule made waits while its
  // definition is not active (a pause withdraws those runs in the same
  // transaction; this covers a batch that read the definition after the pause
  // committed).
  const startable = locked.filter((r) => {
    const def = defs.get(r.definitionId)
    if (def === undefined || !withinGrace(r, now)) return false
    return def.state === 'active' || r.startedBy !== 'schedule'
  })
  // Each version of the batch is expanded once (and cached across batches), and
  // its leading pure steps counted once: a batch is mostly runs of a few versions.
  const expanded = new Map<number, { specs: StepSpec[]; pure: number } | StartRefused>()
  await Promise.all(
    [...new Set(startable.map((r) => r.versionId))].map(async (versionId) => {
      let specs: StepSpec[]
      try {
        specs = await specsForVersion(deps.db, versionId)
      } catch (err) {
        // A database error stays what it is (it may be transient); anything else is the program's.
        if (err instanceof DatabaseError) throw err
        expanded.set(versionId, new StartRefused(`its program cannot be expanded: ${String(err)}`))
        return
      }
      // Pure steps count against the run's step budget like any other.
      let pure = 0
      while (pure < Math.min(specs.length, budget) && deps.registry.get((specs[pure] as StepSpec).kind)?.pure)
        pure++
      expanded.set(versionId, { specs, pure })
    }),
  )
  const plans: Plan[] = startable.map((run) => {
    const version = expanded.get(run.versionId)
    if (version === undefined || version instanceof StartRefused)
      throw version ?? new Error(`version ${run.versionId} was not expanded`)
    const { specs, pure } = version
    const def = defs.get(run.definitionId)
    return { run, definition: { title: def?.title ?? '', slug: def?.slug ?? '' }, specs, pure, reached: pure }
  })

  const leaseUntil = new Date(now.getTime() + deps.leaseMs)
  const { kept, keptAt, results, finished } = await runLeadingPure(deps, plans, now, leaseUntil)
  const rows: StartedStep[] = plans.flatMap((p) =>
    p.specs.map((spec, i) => ({ runId: p.run.id, spec, done: i < p.reached })),
  )
  const ids = await steps.insertStarted(tx, rows, now)
  for (const { at, result } of results) await steps.setStartedResult(tx, ids[at] as number, result)
  for (let k = 0; k < kept.length; k++) (kept[k] as NewLog).stepId = ids[keptAt[k] as number] as number
  if (kept.length > 0) await logs.appendMany(tx, kept)

  // One guarded UPDATE per outcome: (status, phase) groups, in practice one or two.
  const groups = new Map<string, { as: StartedAs; plans: Plan[] }>()
  for (const plan of plans) {
    const as = startedAs(plan.specs, plan.reached, budget, { owner: deps.owner, token, leaseUntil }, now)
    const key = JSON.stringify([as.status, 'owner' in as && as.owner !== undefined, as.phase])
    const group = groups.get(key) ?? { as, plans: [] }
    group.plans.push(plan)
    groups.set(key, group)
  }
  let completed = 0
  const handOff: ClaimedRun[] = []
  for (const { as, plans: members } of groups.values()) {
    const moved = await runs.markStarted(
      tx,
      members.map((p) => p.run.id),
      as,
      { startedAt },
    )
    // The rows are locked by this transaction: anything short is a bug, and the rollback undoes the batch.
    if (moved !== members.length) throw new Error(`start moved ${moved} of ${members.length} locked runs`)
    if (as.status === 'completed') {
      completed += moved
      continue
    }
    if (as.owner === undefined) continue // released, due now
    for (const p of members) {
      handOff.push({
        ...p.run,
        status: as.status,
        currentPhase: as.phase,
        claimedBy: as.owner,
        claimToken: as.token,
        claimExpiresAt: as.leaseUntil,
        wakeAt: as.leaseUntil,
        missedAt: null,
        startedAt,
        definitionTitle: p.definition.title,
        definitionSlug: p.definition.slug,
      })
    }
  }
  return {
    outcome: { locked: locked.length, started: plans.length, completed, handOff, failed: [] },
    finished,
  }
}
