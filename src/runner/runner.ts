/**
 * The Runner: one loop per process that drives every run from its schedule to a
 * terminal status. States: created → active → stopping → stopped.
 *
 * Each tick: reclaim expired leases → materialise (throttled; at once after a
 * definition changed) → mark missed runs → lease due in-flight runs → start
 * due key-less runs, a batch per transaction (start.ts) → claim due keyed runs
 * one by one, each with its key lock → advance what is held (inline steps
 * together in batch.ts, the rest run by run in engine.ts) → log retention
 * (throttled) → heartbeat.
 *
 * Be careful about which parts can throw. `tick()` may throw only database
 * errors from its sweeps; the loop catches them, counts them, logs them and
 * backs off (capped) so a database restart never kills the process. Work on
 * one run is isolated: its errors are logged with the run id and its lease is
 * released in `finally` (if the release itself fails, the lease simply expires
 * and another tick reclaims it).
 */
import { randomUUID } from 'node:crypto'
import { setMaxListeners } from 'node:events'
import { hostname } from 'node:os'
import type { Db } from '../../sql/db.ts'
import { isDbUnavailable } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as heartbeats from '../../sql/runnerHeartbeats.ts'
import { advanceBatch } from './batch.ts'
import { type Clock, systemClock } from './clock.ts'
import {
  advanceRun,
  type ClaimedRun,
  type EngineDeps,
  expandStartingRuns,
  type RunnerObserver,
} from './engine.ts'
import { DEFAULT_MAX_RUNS_AHEAD, materialiseAll } from './materialise.ts'
import { startKeylessBatch } from './start.ts'
import type { StepRegistry } from './steps/registry.ts'
import type { StepSettings } from './steps/types.ts'

export type RunnerState = 'created' | 'active' | 'stopping' | 'stopped'

/** Minimal logger shape (pino's). */
export interface RunnerLogger {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
  debug(obj: object, msg?: string): void
}

/** Options of {@link Runner}. */
export interface RunnerOptions {
  db: Db
  registry: StepRegistry
  /** Unique per process; shown as `claimedBy`. @default `${hostname}-${pid}-${random}` */
  instanceId?: string
  /** Milliseconds between ticks. @default 1000 */
  tickMs?: number
  /** Lease length for a claimed run. @default 30000 */
  leaseMs?: number
  /** Look-ahead for materialisation. @default 24 h */
  horizonMs?: number
  /**
   * Runs kept ahead per (definition, scope), at most: a dense schedule keeps a
   * rolling window this long, topped up when it has run half down.
   * @default 1000
   */
  maxRunsAhead?: number
  /** Minimum time between materialisation passes unless nudged. @default 60000 */
  materialiseEveryMs?: number
  /** Terminal runs' logs older than this are deleted. @default 30 days */
  logRetentionMs?: number
  /**
   * Terminal runs that ended longer ago than this are deleted with their steps
   * and logs; 0 keeps every run. @default 90 days
   */
  runRetentionMs?: number
  /** Minimum time between retention sweeps. @default 1 h */
  retentionEveryMs?: number
  /**
   * Runs per start transaction, and in-flight runs leased per claim statement.
   * A tick runs up to 10 start transactions while a backlog lasts, then ticks
   * again at once. Larger batches are fewer, larger statements: 20,000 runs due
   * at one instant took 0.05 statements and about 80 µs of database CPU per run
   * at 200, 0.011 and about 45 µs at 1000. @default 1000
   */
  batchSize?: number
  /** Runs advanced at once (each uses one pooled connection at a time). @default 8 */
  parallelism?: number
  /**
   * Start transactions in flight at once while a backlog of due runs drains
   * (each holds one pooled connection; one batch at a time otherwise). @default 2
   */
  startConcurrency?: number
  /** Steps per run per claim before it is given back. @default 25 */
  maxStepsPerClaim?: number
  settings?: StepSettings
  clock?: Clock
  logger?: RunnerLogger
  observer?: RunnerObserver
}

const noopLogger: RunnerLogger = { info() {}, warn() {}, error() {}, debug() {} }
/**
 * Cap on the wait after failed ticks. Short enough that a runner notices a
 * restarted database within seconds, long enough not to hammer one that is down.
 */
const MAX_ERROR_BACKOFF_MS = 5_000
/**
 * Start transactions per tick, at most: a backlog drains over a few ticks
 * instead of one pass that starves the claims of runs already in flight.
 */
const MAX_START_BATCHES_PER_TICK = 10
/** Runs per retention round: each round is a few statements over this many runs. */
const RUN_RETENTION_BATCH = 200
/** Rounds per sweep (the rest waits for the next sweep, so one sweep never takes a tick for long). */
const RUN_RETENTION_ROUNDS = 50
/** Log lines the retention sweep reads per statement. */
const RETENTION_PAGE = 1000
/** Heartbeat rows of instances silent this long are deleted (on the retention sweep's cadence). */
const HEARTBEAT_KEEP_MS = 7 * 24 * 3600_000

export class Runner {
  readonly instanceId: string
  private stateValue: RunnerState = 'created'
  private loopPromise: Promise<void> | null = null
  private sleepAbort: AbortController | null = null
  private readonly hardStop = new AbortController()
  private readonly opts: Required<Omit<RunnerOptions, 'observer' | 'instanceId'>> & {
    observer?: RunnerObserver
  }
  private lastMaterialise = 0
  /** When a count-bounded window (a dense schedule) needs topping up, before the usual interval. */
  private refillAt: number | null = null
  private materialiseRequested = true
  private lastRetention = 0
  private consecutiveErrors = 0
  private lastTickAt: Date | null = null
  private readonly startedAt = new Date()
  /** runId → holder run id already logged, so a blocked run's log names its holder once. */
  private readonly blockedLogged = new Map<number, number>()
  private tickSeq = 0
  private nudged = false

  constructor(options: RunnerOptions) {
    // Every in-flight step listens on the hard-stop signal; there may be many.
    setMaxListeners(0, this.hardStop.signal)
    this.instanceId = options.instanceId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 4)}`
    this.opts = {
      db: options.db,
      registry: options.registry,
      tickMs: options.tickMs ?? 1000,
      leaseMs: options.leaseMs ?? 30_000,
      horizonMs: options.horizonMs ?? 24 * 3600_000,
      maxRunsAhead: options.maxRunsAhead ?? DEFAULT_MAX_RUNS_AHEAD,
      materialiseEveryMs: options.materialiseEveryMs ?? 60_000,
      logRetentionMs: options.logRetentionMs ?? 30 * 24 * 3600_000,
      runRetentionMs: options.runRetentionMs ?? 90 * 24 * 3600_000,
      retentionEveryMs: options.retentionEveryMs ?? 3600_000,
      batchSize: options.batchSize ?? 1000,
      parallelism: options.parallelism ?? 8,
      startConcurrency: Math.max(1, options.startConcurrency ?? 2),
      maxStepsPerClaim: options.maxStepsPerClaim ?? 25,
      settings: options.settings ?? { webhookAllow: [] },
      clock: options.clock ?? systemClock,
      logger: options.logger ?? noopLogger,
      observer: options.observer,
    }
  }

  get state(): RunnerState {
    return this.stateValue
  }

  /**
   * True once stop() was called. Not simply "state !== 'active'": a runner that
   * was never started ('created') is driven by calling tick() directly (tests,
   * one-shot tools), and must then advance runs rather than give each one back
   * untouched.
   */
  private get windingDown(): boolean {
    return this.stateValue === 'stopping' || this.stateValue === 'stopped'
  }

  /** When this instance last finished a tick. */
  get lastTick(): Date | null {
    return this.lastTickAt
  }

  /** Begin ticking. Calling it twice is an error: a runner is started once. */
  start(): void {
    if (this.stateValue !== 'created')
      throw new Error(`Runner ${this.instanceId} cannot start from state ${this.stateValue}.`)
    this.stateValue = 'active'
    this.loopPromise = this.loop()
  }

  /** Wake the loop now instead of at the end of its sleep (a run was started, a cue resolved). */
  nudge(): void {
    this.nudged = true
    this.sleepAbort?.abort()
  }

  /** Materialise at the next tick (a definition changed), then nudge. */
  requestMaterialise(): void {
    this.materialiseRequested = true
    this.nudge()
  }

  /**
   * Stop ticking: the step in flight finishes, no new step starts, and every
   * claim this instance holds is released. Steps still running after `graceMs`
   * are aborted (their attempt fails and is retried by another instance).
   *
   * @param graceMs how long to let in-flight steps finish. @default leaseMs / 2
   */
  async stop({ graceMs }: { graceMs?: number } = {}): Promise<void> {
    if (this.stateValue === 'stopped') return
    if (this.stateValue === 'created') {
      this.stateValue = 'stopped'
      return
    }
    if (this.stateValue === 'active') this.stateValue = 'stopping'
    this.sleepAbort?.abort()
    const timer = setTimeout(() => this.hardStop.abort(), graceMs ?? this.opts.leaseMs / 2)
    try {
      await this.loopPromise
    } finally {
      clearTimeout(timer)
    }
    try {
      await runs.releaseAllClaims(this.opts.db, this.instanceId, this.opts.clock.now())
      await heartbeats.markStopped(this.opts.db, this.instanceId)
    } catch (err) {
      // The leases expire by themselves; another instance will reclaim them.
      this.opts.logger.warn({ err, instance: this.instanceId }, 'could not release claims while stopping')
    }
    this.stateValue = 'stopped'
  }

  private async loop(): Promise<void> {
    while (this.stateValue === 'active') {
      const started = Date.now()
      try {
        await this.tick()
        this.consecutiveErrors = 0
      } catch (err) {
        this.consecutiveErrors++
        this.opts.observer?.tickError?.()
        this.opts.logger.error(
          {
            err,
            instance: this.instanceId,
            consecutiveErrors: this.consecutiveErrors,
            databaseUnavailable: isDbUnavailable(err),
          },
          'tick failed',
        )
      }
      const elapsed = Date.now() - started
      this.opts.observer?.tickDuration?.(elapsed)
      if (this.stateValue !== 'active') break
      const wait =
        this.consecutiveErrors > 0
          ? Math.min(
              this.opts.tickMs * 2 ** this.consecutiveErrors,
              Math.max(MAX_ERROR_BACKOFF_MS, this.opts.tickMs),
            )
          : Math.max(0, this.opts.tickMs - elapsed)
      if (this.nudged && this.consecutiveErrors === 0) {
        this.nudged = false
        continue
      }
      await this.sleep(this.consecutiveErrors > 0 ? wait : await this.untilNextWake(wait))
      this.nudged = false
    }
  }

  /**
   * The sleep after a good tick, aimed at the soonest `wake_at` ahead (a run
   * coming due, a timer running out) when that is sooner than the next tick: a
   * run due between two ticks starts at its time, not up to TICK_MS late. One
   * index read; runs made due by someone else (an API start, a resolved cue)
   * nudge the loop instead. A failed read keeps the plain tick.
   */
  private async untilNextWake(tickWait: number): Promise<number> {
    if (tickWait <= 0) return 0
    const { db, clock } = this.opts
    try {
      const now = clock.now()
      const next = await runs.nextWakeAfter(db, now)
      if (next === null) return tickWait
      // +1 ms: a timer can fire a little early, and the due query is `wake_at <= now`.
      const until = next.getTime() - clock.now().getTime() + 1
      return Math.max(0, Math.min(tickWait, until))
    } catch (err) {
      this.opts.logger.warn(
        { err, instance: this.instanceId },
        'could not read the next wake-up time; sleeping a whole tick',
      )
      return tickWait
    }
  }

  private async sleep(ms: number): Promise<void> {
    // A nudge that came while the wait was being worked out (no sleep to abort yet) still counts.
    if (ms <= 0 || this.nudged) return
    const controller = new AbortController()
    this.sleepAbort = controller
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms)
      controller.signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer)
          resolve()
        },
        { once: true },
      )
    })
    this.sleepAbort = null
  }

  /** One pass. Public so tests can drive the runner tick by tick with an injected clock. */
  async tick(): Promise<void> {
    const { db, clock } = this.opts
    // Lease expiry is judged on the database's clock (sql/leases.ts).
    await runs.reclaimStale(db)
    await steps.reclaimStale(db)
    const now = clock.now()
    // A definition changed: materialise first, its runs may be due now. The
    // periodic pass (and a dense schedule's refill) waits until the due runs
    // have started, so it never makes them late.
    const requested = this.materialiseRequested
    if (requested) await this.materialise(now)
    await this.markMissed(clock.now())
    await this.advanceDue()
    const later = clock.now()
    if (
      !requested &&
      (later.getTime() - this.lastMaterialise >= this.opts.materialiseEveryMs ||
        (this.refillAt !== null && later.getTime() >= this.refillAt))
    ) {
      // Runs it made that are due already start on a pass at once; later ones are the sleep's aim.
      if ((await this.materialise(later)) > 0 && !this.windingDown) this.nudged = true
    }
    const after = clock.now()
    if (after.getTime() - this.lastRetention >= this.opts.retentionEveryMs) {
      this.lastRetention = after.getTime()
      await this.retention(after)
    }
    const lag = this.lastTickAt ? Math.max(0, Date.now() - this.lastTickAt.getTime() - this.opts.tickMs) : 0
    this.opts.observer?.tickLag?.(lag)
    await heartbeats.beat(db, {
      instanceId: this.instanceId,
      host: hostname(),
      pid: process.pid,
      startedAt: this.startedAt,
      tickLagMs: lag,
    })
    this.lastTickAt = new Date()
  }

  /** One materialisation pass; answers how many runs it made. */
  private async materialise(now: Date): Promise<number> {
    this.materialiseRequested = false
    this.lastMaterialise = now.getTime()
    const pass = await materialiseAll(
      this.opts.db,
      now,
      { horizonMs: this.opts.horizonMs, maxRunsAhead: this.opts.maxRunsAhead },
      (def, err) =>
        this.opts.logger.error(
          { err, definitionId: def.id, slug: def.slug },
          'materialisation failed for a definition',
        ),
    )
    this.refillAt = pass.refillAt?.getTime() ?? null
    return pass.created
  }

  private async markMissed(now: Date): Promise<void> {
    const { db } = this.opts
    for (let round = 0; round < 20; round++) {
      const found = await runs.findMissed(db, now, 500)
      if (found.length === 0) return
      // A run found here in another status kept a stamp it should have dropped
      // when it left `scheduled`: clear it, so no tick reads it again.
      await runs.clearMissedAt(
        db,
        found.filter((r) => r.status !== 'scheduled').map((r) => r.id),
      )
      const missed = found.filter((r) => r.status === 'scheduled')
      const ids = missed.map((r) => r.id)
      await runs.transitionMany(db, ids, 'scheduled', 'missed', {
        error: 'not started within its grace window',
      })
      const entries = await Promise.all(
        missed.map(async (r) => {
          const holder = r.concurrencyKey ? await runs.concurrencyHolder(db, r.concurrencyKey, r.id) : null
          return {
            runId: r.id,
            level: 'warn' as const,
            message: holder
              ? `missed: not started within the grace window; concurrency key "${r.concurrencyKey}" was held by run ${holder.id}`
              : 'missed: not started within the grace window',
            actor: this.instanceId,
            data: holder ? { holderRunId: holder.id } : undefined,
          }
        }),
      )
      await logs.appendMany(db, entries)
      for (const id of ids) this.blockedLogged.delete(id)
      if (found.length < 500) return
    }
  }

  /** Claim what is due (batch claims for key-less runs, one by one for keyed ones) and advance it. */
  private async advanceDue(): Promise<void> {
    const { db, clock, batchSize } = this.opts
    const now = clock.now()
    const leaseUntil = new Date(now.getTime() + this.opts.leaseMs)
    const token = `${this.instanceId}:${++this.tickSeq}`
    const claimFrom = Date.now()
    let claimed: RunRow[] = []
    claimed.push(
      ...(await runs.claimTickBatch(db, this.instanceId, `${token}:t`, leaseUntil, now, batchSize)),
    )
    // A full claim means more in-flight runs are due (a burst of timers running
    // out together): tick again at once rather than after TICK_MS.
    if (claimed.length >= batchSize && !this.windingDown) this.nudged = true
    let started: ClaimedRun[]
    try {
      started = await this.startKeylessDue(`${token}:s`)
    } catch (err) {
      await this.releaseAll(
        claimed.map((r) => r.id),
        now,
      )
      throw err
    }
    // Keyed scheduled runs: each needs its key lock, taken with its claim. Their
    // own query, so no backlog of key-less runs can hide them past their grace.
    const due = await runs.findDueKeyed(db, now, batchSize)
    // A key found held (or just taken) stays held for the rest of this pass, so
    // the other runs waiting on it are deferred without a claim transaction each.
    const holderOfKey = new Map<string, number>()
    for (const run of due) {
      // Keyed runs, and runs under an overlap policy (they decide one by one, under their scope's lock).
      if (run.status !== 'scheduled' || (!run.concurrencyKey && !run.overlap)) continue
      if (this.windingDown) break
      const knownHolder = run.concurrencyKey ? holderOfKey.get(run.concurrencyKey) : undefined
      if (knownHolder !== undefined) {
        await this.noteBlocked(run, knownHolder, now)
        continue
      }
      const answer = await runs.claimStart(db, run, this.instanceId, leaseUntil, now)
      if (answer.overlap) await this.noteOverlap(run, answer.overlap, now)
      if (answer.claimed) {
        this.blockedLogged.delete(run.id)
        if (run.concurrencyKey) holderOfKey.set(run.concurrencyKey, run.id)
        // expandStartingRuns re-reads every claimed run, so the claim's own effect is all it needs here.
        claimed.push({ ...run, status: 'starting', claimedBy: this.instanceId, claimExpiresAt: leaseUntil })
      } else if (answer.overlap) {
        // Decided by the overlap policy (and logged above).
      } else if (answer.blockedBy !== null && run.concurrencyKey) {
        this.opts.observer?.claimConflict?.()
        holderOfKey.set(run.concurrencyKey, answer.blockedBy)
        await this.noteBlocked(run, answer.blockedBy, now)
      } else {
        this.opts.observer?.claimConflict?.()
      }
    }
    if (claimed.length === 0 && started.length === 0) return
    // The keyed loop can be long (a transaction per due keyed run). Past a third
    // of the lease, the claims taken at its start may have expired and been
    // taken over by another instance: renew what is still ours and drop the
    // rest, or two instances would start the same run.
    if (Date.now() - claimFrom > this.opts.leaseMs / 3) {
      const renewedFrom = clock.now()
      const renewedUntil = new Date(renewedFrom.getTime() + this.opts.leaseMs)
      const mine = await runs.renewClaims(
        db,
        [...claimed, ...started].map((r) => r.id),
        this.instanceId,
        renewedUntil,
        renewedFrom,
      )
      claimed = claimed.filter((r) => mine.has(r.id))
      started = started.filter((r) => mine.has(r.id))
    }
    const engine = this.engineDeps()
    let ready: ClaimedRun[]
    try {
      ready = [...(await expandStartingRuns(engine, claimed)), ...started]
    } catch (err) {
      await this.releaseAll(
        [...claimed, ...started].map((r) => r.id),
        now,
      )
      throw err
    }
    // Inline steps of the whole batch go together; the rest run one by one.
    let handOff: ClaimedRun[]
    try {
      const batch = await advanceBatch(engine, ready)
      handOff = batch.handOff
      await runs.releaseClaims(db, batch.release, this.instanceId, clock.now())
      for (const { id, wakeAt } of batch.releaseAt)
        await runs.releaseClaim(db, id, this.instanceId, { wakeAt })
    } catch (err) {
      // Nothing of this batch will be advanced now: give every claim back rather
      // than leave the runs waiting out their leases.
      await this.releaseAll(
        ready.map((r) => r.id),
        clock.now(),
      )
      throw err
    }
    await this.forEachLimited(handOff, (run) => this.advanceClaimed(engine, run))
  }

  /**
   * Start due key-less runs, a batch per transaction (start.ts), until none is
   * left or the pass has started {@link MAX_START_BATCHES_PER_TICK} batches.
   * Answers the runs claimed for the rest of their program.
   */
  private async startKeylessDue(token: string): Promise<ClaimedRun[]> {
    const engine = this.engineDeps()
    const handOff: ClaimedRun[] = []
    let batches = 0
    let drained = false
    const startOne = async (onLocked?: (count: number) => void) => {
      const batch = await startKeylessBatch(engine, `${token}:${batches++}`, this.opts.batchSize, {
        onLocked,
      })
      handOff.push(...batch.handOff)
      for (const { runId, reason } of batch.failed)
        this.opts.logger.error(
          { runId, instance: this.instanceId, reason },
          'a run could not be started; it failed',
        )
      // A short batch means the due index is drained (or holds only runs past their grace).
      if (batch.locked < this.opts.batchSize || batch.started === 0) drained = true
    }
    const more = () => !drained && !this.windingDown && batches < MAX_START_BATCHES_PER_TICK
    const keepStarting = async () => {
      while (more()) await startOne()
    }
    // One batch first. Only a backlog (its locking read came back full) brings
    // in the other `startConcurrency - 1` workers, so one batch's statements
    // overlap another's work. They join as soon as the first batch has locked
    // its runs rather than once it commits, which would run the first batch of
    // every backlog alone.
    const helpers: Promise<void>[] = []
    const joinHelpers = (locked: number) => {
      if (locked < this.opts.batchSize || helpers.length > 0 || !more()) return
      for (let i = 1; i < this.opts.startConcurrency; i++) helpers.push(keepStarting())
    }
    try {
      const first = (async () => {
        await startOne(joinHelpers)
        await keepStarting()
      })()
      // allSettled: a failed worker must not leave the others still starting runs after the release below.
      const settled = [...(await Promise.allSettled([first])), ...(await Promise.allSettled(helpers))]
      const failed = settled.find((w) => w.status === 'rejected')
      if (failed) throw failed.reason
    } catch (err) {
      // The batches that committed hold claims: give them back rather than let them wait out their leases.
      await this.releaseAll(
        handOff.map((r) => r.id),
        this.opts.clock.now(),
      )
      throw err
    }
    // A backlog is left: tick again at once rather than after TICK_MS.
    if (!drained && !this.windingDown) this.nudged = true
    return handOff
  }

  /** Record what a run's overlap policy decided, on the runs it touched; a held run waits a tick. */
  private async noteOverlap(run: RunRow, decided: runs.OverlapOutcome, now: Date): Promise<void> {
    const { db } = this.opts
    const actor = this.instanceId
    switch (decided.outcome) {
      case 'skipped':
        await logs.append(db, {
          runId: run.id,
          level: 'warn',
          message: `missed: run ${decided.holderId} of this definition and scope was still in progress (overlap policy SKIP)`,
          actor,
          data: { holderRunId: decided.holderId, overlap: 'skip' },
        })
        return
      case 'superseded':
        await logs.append(db, {
          runId: run.id,
          level: 'warn',
          message: `missed: newer run ${decided.heldId} is held until run ${decided.holderId} ends (overlap policy BUFFER_ONE)`,
          actor,
          data: { heldRunId: decided.heldId, holderRunId: decided.holderId, overlap: 'buffer_one' },
        })
        return
      case 'held': {
        await runs.deferStart(db, run.id, new Date(now.getTime() + this.opts.tickMs))
        if (decided.supersededId !== null) {
          await logs.append(db, {
            runId: decided.supersededId,
            level: 'warn',
            message: `missed: newer run ${run.id} came due while run ${decided.holderId} was still in progress (overlap policy BUFFER_ONE)`,
            actor,
            data: { newerRunId: run.id, holderRunId: decided.holderId, overlap: 'buffer_one' },
          })
        }
        if (this.blockedLogged.get(run.id) === decided.holderId) return
        if (this.blockedLogged.size > 10_000) this.blockedLogged.clear()
        this.blockedLogged.set(run.id, decided.holderId)
        await logs.append(db, {
          runId: run.id,
          level: 'info',
          message: `held until run ${decided.holderId} is out of the way (overlap policy BUFFER_ONE)`,
          actor,
          data: { holderRunId: decided.holderId, overlap: 'buffer_one' },
        })
        return
      }
      case 'cancelled':
        await logs.append(db, {
          runId: decided.cancelledId,
          level: 'warn',
          message: `cancelled: newer run ${run.id} of this definition and scope came due (overlap policy CANCEL_OTHER)`,
          actor,
          data: { newerRunId: run.id, overlap: 'cancel_other' },
        })
        return
    }
  }

  private async noteBlocked(run: RunRow, holderId: number, now: Date): Promise<void> {
    const { db } = this.opts
    // Rotate blocked runs behind newly due ones; their grace window still decides.
    await runs.deferStart(db, run.id, new Date(now.getTime() + this.opts.tickMs))
    if (this.blockedLogged.get(run.id) === holderId) return
    if (this.blockedLogged.size > 10_000) this.blockedLogged.clear()
    this.blockedLogged.set(run.id, holderId)
    await logs.append(db, {
      runId: run.id,
      level: 'info',
      message: `waiting for concurrency key "${run.concurrencyKey}", held by run ${holderId}`,
      actor: this.instanceId,
      data: { holderRunId: holderId, key: run.concurrencyKey },
    })
  }

  private async advanceClaimed(engine: EngineDeps, run: ClaimedRun): Promise<void> {
    const { db, clock, logger } = this.opts
    let wakeAt: Date | null = clock.now()
    try {
      const answer = await advanceRun(engine, run)
      wakeAt = 'stop' in answer ? clock.now() : answer.wakeAt
    } catch (err) {
      this.opts.observer?.tickError?.()
      logger.error(
        { err, runId: run.id, instance: this.instanceId },
        'advancing a run failed; it will be retried',
      )
      // Come back after a tick rather than at once, so a persistent error does not spin.
      wakeAt = new Date(clock.now().getTime() + this.opts.tickMs)
    } finally {
      try {
        await runs.releaseClaim(db, run.id, this.instanceId, { wakeAt })
      } catch (err) {
        logger.warn({ err, runId: run.id }, 'could not release a claim; it will expire and be reclaimed')
      }
    }
  }

  private async releaseAll(ids: number[], now: Date): Promise<void> {
    try {
      await runs.releaseClaims(this.opts.db, ids, this.instanceId, now)
    } catch (err) {
      this.opts.logger.warn(
        { err, runIds: ids },
        'could not release claims; they will expire and be reclaimed',
      )
    }
  }

  private async forEachLimited<T>(items: readonly T[], fn: (item: T) => Promise<void>): Promise<void> {
    let next = 0
    const workers = Array.from({ length: Math.min(this.opts.parallelism, items.length) }, async () => {
      while (next < items.length) {
        const item = items[next++] as T
        await fn(item)
      }
    })
    await Promise.all(workers)
  }

  private engineDeps(): EngineDeps {
    return {
      db: this.opts.db,
      registry: this.opts.registry,
      clock: this.opts.clock,
      owner: this.instanceId,
      leaseMs: this.opts.leaseMs,
      settings: this.opts.settings,
      maxStepsPerClaim: this.opts.maxStepsPerClaim,
      observer: this.opts.observer,
      stopping: () => this.windingDown,
      hardStop: this.hardStop.signal,
    }
  }

  /**
   * Delete the logs of runs that ended more than the retention period ago, and
   * forget instances silent for a week. The sweep walks the log lines from the
   * oldest one and stops at the first line young enough to keep: what it reads
   * is what it deletes plus the old lines of runs still going (or ended within
   * the period), not every finished run, which walking the runs read again on
   * every sweep once their logs were gone.
   */
  private async retention(now: Date): Promise<void> {
    await this.logRetention(now)
    await this.runRetention(now)
  }

  /**
   * Run history retention: terminal runs that ended before the retention
   * period go with their steps and logs, a batch of {@link RUN_RETENTION_BATCH}
   * per round of short statements, never a run that is not terminal. Each
   * round's counts go to the observer, so cached run counts stay right.
   */
  private async runRetention(now: Date): Promise<void> {
    if (this.opts.runRetentionMs <= 0) return
    const cutoff = new Date(now.getTime() - this.opts.runRetentionMs)
    let total = 0
    for (let round = 0; round < RUN_RETENTION_ROUNDS; round++) {
      if (this.windingDown) break
      const expired = await runs.expiredRuns(this.opts.db, cutoff, RUN_RETENTION_BATCH)
      if (expired.length === 0) break
      const deleted = await runs.deleteTerminalRuns(this.opts.db, expired)
      this.opts.observer?.runsDeleted?.(deleted)
      total += Object.values(deleted).reduce((a, n) => a + (n ?? 0), 0)
      if (expired.length < RUN_RETENTION_BATCH) break
    }
    if (total > 0)
      this.opts.logger.info({ runs: total, before: cutoff }, 'run retention: deleted finished runs')
  }

  private async logRetention(now: Date): Promise<void> {
    const { db, logger } = this.opts
    const cutoff = new Date(now.getTime() - this.opts.logRetentionMs)
    let after = 0
    for (let round = 0; round < 20; round++) {
      const lines = await logs.oldestLines(db, after, RETENTION_PAGE)
      const old = lines.filter((l) => l.at.getTime() < cutoff.getTime())
      const ended = await runs.endedBefore(db, [...new Set(old.map((l) => l.runId))], cutoff)
      if (ended.length > 0) {
        const deleted = await logs.deleteForRuns(db, ended)
        logger.info({ runs: ended.length, lines: deleted }, 'log retention: deleted logs of finished runs')
      }
      const last = lines.at(-1)
      if (last === undefined || old.length < lines.length || lines.length < RETENTION_PAGE) break
      after = last.id
    }
    const silentSince = new Date(now.getTime() - HEARTBEAT_KEEP_MS)
    const forgotten = await heartbeats.pruneBefore(db, silentSince)
    if (forgotten > 0) logger.info({ instances: forgotten }, 'forgot runner instances silent for a week')
  }
}
