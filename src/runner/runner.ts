/**
 * The Runner: one loop per process that drives every run from its schedule to a
 * terminal status. States: created → active → stopping → stopped.
 *
 * Each tick: materialise first if a definition changed → start due key-less
 * runs, a batch per transaction (start.ts; first, so nothing else makes a run
 * late) → lease due in-flight runs → reclaim expired leases → mark missed runs
 * → claim due keyed runs one by one, each with its key lock
 * (keyedStart.ts) → advance what is held (a batch at a time in batch.ts, what
 * it leaves run by run in engine.ts, both through the step executor in
 * executor/) → materialise (throttled) → retention (throttled) → heartbeat.
 * The sweeps and their throttles live in housekeeping.ts; the options and
 * their defaults in options.ts.
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
import { isDbUnavailable } from '../../sql/db.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as heartbeats from '../../sql/runnerHeartbeats.ts'
import { advanceBatch } from './batch.ts'
import { advanceRun, expandStartingRuns } from './engine.ts'
import { Housekeeping } from './housekeeping.ts'
import { KeyedStarter } from './keyedStart.ts'
import { type ResolvedOptions, type RunnerOptions, resolveOptions } from './options.ts'
import { startKeylessDue } from './start.ts'
import type { ClaimedRun, EngineDeps, RunAnswer } from './types.ts'

export type RunnerState = 'created' | 'active' | 'stopping' | 'stopped'
export type { RunnerLogger, RunnerOptions } from './options.ts'

/**
 * Cap on the wait after failed ticks. Short enough that a runner notices a
 * restarted database within seconds, long enough not to hammer one that is down.
 */
const MAX_ERROR_BACKOFF_MS = 5_000

export class Runner {
  readonly instanceId: string
  private stateValue: RunnerState = 'created'
  private loopPromise: Promise<void> | null = null
  private sleepAbort: AbortController | null = null
  private readonly hardStop = new AbortController()
  private readonly opts: ResolvedOptions
  private readonly housekeeping: Housekeeping
  private readonly keyed: KeyedStarter
  private consecutiveErrors = 0
  private lastTickAt: Date | null = null
  private tickSeq = 0
  private nudged = false
  /** The instant the last pass looked for due work at: what came due after it was not seen. */
  private dueCheckedAt: Date | null = null

  constructor(options: RunnerOptions) {
    // Every in-flight step listens on the hard-stop signal; there may be many.
    setMaxListeners(0, this.hardStop.signal)
    this.instanceId = options.instanceId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 4)}`
    this.opts = resolveOptions(options)
    const stopping = () => this.windingDown
    this.housekeeping = new Housekeeping({ ...this.opts, instanceId: this.instanceId, stopping })
    this.keyed = new KeyedStarter({ ...this.opts, instanceId: this.instanceId, stopping })
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
    this.housekeeping.requestMaterialise()
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
   *
   * The soonest wake-up after the instant the pass looked for due work, not
   * after now: a run that came due while the pass was busy (a slow step, a
   * loaded machine) was not seen by it, and starts at once rather than at the
   * following wake-up, up to a tick late. What the pass saw due and left (a
   * run claimed elsewhere, a key held) lies before that instant, so it cannot
   * keep the loop from sleeping.
   */
  private async untilNextWake(tickWait: number): Promise<number> {
    if (tickWait <= 0) return 0
    const { db, clock } = this.opts
    try {
      const now = clock.now()
      const next = await runs.nextWakeAfter(db, this.dueCheckedAt ?? now)
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
    // A definition changed: materialise first, its runs may be due now. The
    // periodic pass (and a dense schedule's refill) waits until the due runs
    // have started, so it never makes them late.
    const requested = this.housekeeping.materialiseRequestedNow
    if (requested) await this.housekeeping.materialiseIfDue(clock.now())
    // Due key-less runs start first, then due in-flight runs are leased, both
    // before the sweeps: the sleep was aimed at their time, and every statement
    // ahead of a start makes it that much later (the start's lock stamps
    // `started_at`, on the database's clock). The in-flight runs lose nothing
    // by waiting: nothing advances until both are done. The start leaves a run
    // past its grace to the missed sweep, and a lease reclaimed by the sweep
    // is taken at the next pass.
    const claimFrom = Date.now()
    const now = clock.now()
    this.dueCheckedAt = now
    const leaseUntil = new Date(now.getTime() + this.opts.leaseMs)
    const token = `${this.instanceId}:${++this.tickSeq}`
    let started: ClaimedRun[] = []
    let claimed: RunRow[] = []
    await this.givingBackOnFailure(
      () => [...claimed, ...started],
      async () => {
        started = await this.startDue(token)
        claimed = await runs.claimTickBatch(
          db,
          this.instanceId,
          `${token}:t`,
          leaseUntil,
          now,
          this.opts.batchSize,
        )
        // A full claim means more in-flight runs are due (a burst of timers running
        // out together): tick again at once rather than after TICK_MS.
        if (claimed.length >= this.opts.batchSize && !this.windingDown) this.nudged = true
        // Lease expiry is judged on the database's clock (sql/leases.ts).
        await runs.reclaimStale(db)
        await steps.reclaimStale(db)
        this.keyed.forget(await this.housekeeping.markMissed(clock.now()))
      },
    )
    await this.advanceDue(claimed, started, { claimFrom, now, leaseUntil })
    if (!requested) {
      // Runs it made that are due already start on a pass at once; later ones are the sleep's aim.
      const made = await this.housekeeping.materialiseIfDue(clock.now())
      if (made > 0 && !this.windingDown) this.nudged = true
    }
    await this.housekeeping.retentionIfDue(clock.now())
    const lag = this.lastTickAt ? Math.max(0, Date.now() - this.lastTickAt.getTime() - this.opts.tickMs) : 0
    this.opts.observer?.tickLag?.(lag)
    await this.housekeeping.beat(lag)
    this.lastTickAt = new Date()
  }

  /** Start due key-less runs, a batch per transaction (start.ts); answers those left claimed for the rest of their program. */
  private async startDue(token: string): Promise<ClaimedRun[]> {
    const pass = await startKeylessDue(this.engineDeps(), {
      token: `${token}:s`,
      batchSize: this.opts.batchSize,
      concurrency: this.opts.startConcurrency,
      onFailed: (runId, reason) =>
        this.opts.logger.error(
          { runId, instance: this.instanceId, reason },
          'a run could not be started; it failed',
        ),
      release: (ids) => this.releaseAll(ids, this.opts.clock.now()),
    })
    // A backlog is left: tick again at once rather than after the tick interval.
    if (pass.backlog && !this.windingDown) this.nudged = true
    return pass.handOff
  }

  /**
   * Claim due keyed runs (one by one) and advance them with the in-flight runs
   * leased and the runs the start handed over, all claimed since `claimFrom`.
   */
  private async advanceDue(
    leased: RunRow[],
    handedOver: ClaimedRun[],
    at: { claimFrom: number; now: Date; leaseUntil: Date },
  ): Promise<void> {
    const { db, clock, batchSize } = this.opts
    const { claimFrom, now, leaseUntil } = at
    let started = handedOver
    let claimed = [...leased]
    // Keyed runs and runs under an overlap policy, one by one (keyedStart.ts).
    const holding = () => [...claimed, ...started]
    claimed.push(
      ...(await this.givingBackOnFailure(holding, () => this.keyed.claimDue(now, leaseUntil, batchSize))),
    )
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
    const ready = [
      ...(await this.givingBackOnFailure(holding, () => expandStartingRuns(engine, claimed))),
      ...started,
    ]
    // The whole batch goes together, step by step; what it leaves runs one by
    // one. A run it lets go on alone (its step is still executing, or failed
    // the run) is released by its own continuation, whatever becomes of the rest.
    const alone: Promise<void>[] = []
    const aloneIds = new Set<number>()
    const onAlone = (run: ClaimedRun, done: Promise<RunAnswer>) => {
      aloneIds.add(run.id)
      alone.push(this.advanceClaimed(run, () => done))
    }
    let handOff: ClaimedRun[]
    try {
      const batch = await advanceBatch(engine, ready, onAlone)
      handOff = batch.handOff
      await runs.releaseClaims(db, batch.release, this.instanceId, clock.now())
      await runs.releaseClaimsAt(db, batch.releaseAt, this.instanceId)
    } catch (err) {
      // Nothing more of this batch will be advanced now: give back every claim
      // not in the hands of a continuation rather than leave the runs waiting
      // out their leases, and let those continuations finish first.
      await this.releaseAll(
        ready.filter((r) => !aloneIds.has(r.id)).map((r) => r.id),
        clock.now(),
      )
      await Promise.all(alone)
      throw err
    }
    await Promise.all([
      ...alone,
      this.forEachLimited(handOff, (run) => this.advanceClaimed(run, () => advanceRun(engine, run))),
    ])
  }

  /**
   * Run `work`; if it fails, give back the claims `holding` names at that
   * moment (due now) rather than leave their runs waiting out their leases,
   * then fail as it did.
   */
  private async givingBackOnFailure<T>(
    holding: () => readonly { id: number }[],
    work: () => Promise<T>,
  ): Promise<T> {
    try {
      return await work()
    } catch (err) {
      await this.releaseAll(
        holding().map((r) => r.id),
        this.opts.clock.now(),
      )
      throw err
    }
  }

  /** Advance one claimed run with `work`, then release it, due when `work` says (or soon, if it failed). */
  private async advanceClaimed(run: ClaimedRun, work: () => Promise<RunAnswer>): Promise<void> {
    const { db, clock, logger } = this.opts
    let wakeAt: Date | null = clock.now()
    try {
      const answer = await work()
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
      stepConcurrency: this.opts.parallelism,
      observer: this.opts.observer,
      stopping: () => this.windingDown,
      hardStop: this.hardStop.signal,
    }
  }
}
