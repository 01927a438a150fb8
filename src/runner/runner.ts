/**
 * The Runner: one loop per process that drives every run from its schedule to a
 * terminal status. States: created → active → stopping → stopped.
 *
 * Each tick: materialise first if a definition changed (a running loop does
 * it beside its passes instead, materialiseAside) → start due key-less
 * runs, a batch per transaction (start.ts; first, so nothing else makes a run
 * late) → lease due in-flight runs → reclaim expired leases → mark missed runs
 * → claim due keyed runs one by one, each with its key lock
 * (keyedStart.ts) → advance everything held together (advance.ts, each
 * attempt through executor/attempt.ts; a straggler goes on as a batch of one)
 * → materialise (throttled) → retention (throttled) → heartbeat.
 * The sweeps and their throttles live in housekeeping.ts; the options and
 * their defaults in options.ts.
 *
 * A running runner does not wait for the batch it advances: the pass hands it
 * to a flight (flights.ts, at most `batchesInFlight` at once) and ends, and
 * the next pass comes at a nudge (a resolved cue, a started run), at the
 * soonest `wake_at` (a timer; a flight's release moves a sleep aimed later
 * sooner) or at the next tick, and claims what came due meanwhile. A GO or a
 * timer no longer waits behind a round of slow webhooks. Nor behind a pass:
 * a nudge and a released timer's end also wake the wake lane (wakeLane.ts),
 * which claims the in-flight runs due then and advances them beside the
 * passes. `tick()` (tests, one-shot tools) still advances everything it
 * claimed before it returns.
 *
 * Be careful about which parts can throw. `tick()` may throw only database
 * errors from its sweeps; the loop catches them, counts them, logs them and
 * backs off (capped) so a database restart never kills the process. Every
 * claim a pass takes is held by one `HeldClaims` (held.ts) and given back in
 * the tick's `finally`: each run as soon as it is answered, the rest due now.
 * A run whose own writes failed is answered with its error, logged with the
 * run id and tried again after a tick (if a release itself fails, the lease
 * simply expires and another tick reclaims it).
 */
import { randomUUID } from 'node:crypto'
import { setMaxListeners } from 'node:events'
import { hostname } from 'node:os'
import { isDbUnavailable } from '../../sql/db.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as heartbeats from '../../sql/runnerHeartbeats.ts'
import { tickBackoffMs } from './backoff.ts'
import { advanceInChunks } from './chunkedAdvance.ts'
import { Doorbell } from './doorbell.ts'
import { expandStartingRuns } from './expand.ts'
import { type Flights, loggedFlights, settleAll } from './flights.ts'
import { HeldClaims, type NudgeWatch } from './held.ts'
import { Housekeeping } from './housekeeping.ts'
import { KeyedStarter } from './keyedStart.ts'
import { LoopSleep } from './loopSleep.ts'
import { untilNextWake } from './nextWake.ts'
import { type ResolvedOptions, type RunnerOptions, resolveOptions } from './options.ts'
import { PassPhases, SlowPassWarning } from './passPhases.ts'
import { startKeylessDue } from './start.ts'
import type { ClaimedRun, EngineDeps } from './types.ts'
import { WakeLane } from './wakeLane.ts'

export type RunnerState = 'created' | 'active' | 'stopping' | 'stopped'
export type { RunnerLogger, RunnerOptions } from './options.ts'

export class Runner {
  readonly instanceId: string
  private stateValue: RunnerState = 'created'
  private loopPromise: Promise<void> | null = null
  private readonly sleeper = new LoopSleep()
  /** The soonest wake time a flight's release reported since the last read of the next wake-up (runner's clock, ms). */
  private wakeHint: number | null = null
  private readonly flights: Flights
  /** Woken runs (an answer's nudge, a timer's end), claimed and advanced beside the passes. */
  readonly lane: WakeLane
  /** Rung by instances without a runner that made a run due; null unless the `doorbell` option is on. */
  readonly doorbell: Doorbell | null
  /** The materialisation going on beside the passes, if any (materialiseAside). */
  private materialising: Promise<void> | null = null
  private readonly hardStop = new AbortController()
  private readonly opts: ResolvedOptions
  private readonly housekeeping: Housekeeping
  private readonly keyed: KeyedStarter
  private consecutiveErrors = 0
  private lastTickAt: Date | null = null
  private tickSeq = 0
  private nudged = false
  /** Nudges so far: a release of a parked run after one wakes the lane (held.ts). */
  private nudges = 0
  /** The instant the last pass looked for due work at: what came due after it was not seen. */
  private dueCheckedAt: Date | null = null
  private readonly slowPass: SlowPassWarning

  constructor(options: RunnerOptions) {
    // Every in-flight step listens on the hard-stop signal; there may be many.
    setMaxListeners(0, this.hardStop.signal)
    this.instanceId = options.instanceId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 4)}`
    this.opts = resolveOptions(options)
    this.slowPass = new SlowPassWarning({ ...this.opts, instanceId: this.instanceId })
    const stopping = () => this.windingDown
    const { db, logger, doorbell } = this.opts
    this.doorbell = doorbell
      ? new Doorbell({ db, logger, instanceId: this.instanceId, onRing: () => this.nudge() })
      : null
    const doorbellAddress = () => this.doorbell?.address ?? null
    this.housekeeping = new Housekeeping({
      ...this.opts,
      reclaimEveryMs: this.opts.tickMs,
      instanceId: this.instanceId,
      stopping,
      doorbellAddress,
    })
    this.keyed = new KeyedStarter({ ...this.opts, instanceId: this.instanceId, stopping })
    this.flights = loggedFlights(
      this.opts.batchesInFlight,
      this.opts,
      this.instanceId,
      'advancing a batch failed; its runs are given back and tried again',
    )
    this.lane = new WakeLane({
      opts: this.opts,
      instanceId: this.instanceId,
      engine: () => this.engineDeps(),
      active: () => this.stateValue === 'active',
      token: () => `${this.instanceId}:${++this.tickSeq}:w`,
      released: (wakeAts) => this.wakeBy(wakeAts),
      nudged: this.nudgeWatch,
    })
  }

  /** For the claims' holders: the nudges so far, and the lane to wake after a nudged release. */
  private readonly nudgeWatch: NudgeWatch = { count: () => this.nudges, wake: () => this.lane.wake() }

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

  /** How long the loop's sleep has left (ms); 0 while it passes. A pause now delays nothing it knows of. */
  get asleepForMs(): number {
    return this.sleeper.leftMs
  }

  /** Begin ticking. Calling it twice is an error: a runner is started once. */
  start(): void {
    if (this.stateValue !== 'created')
      throw new Error(`Runner ${this.instanceId} cannot start from state ${this.stateValue}.`)
    this.stateValue = 'active'
    this.doorbell?.start()
    this.loopPromise = this.loop()
  }

  /** Wake the loop now instead of at the end of its sleep (a run was started, a cue resolved), and the wake lane. */
  nudge(): void {
    this.nudges++
    this.nudged = true
    this.sleeper.wake()
    this.lane.wake()
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
    this.sleeper.wake()
    await this.doorbell?.stop()
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
    try {
      while (this.stateValue === 'active') {
        // A pass hands what it claimed to a flight; at most `batchesInFlight` at once.
        const waitFrom = performance.now()
        await this.flights.slot()
        if (this.stateValue !== 'active') break
        await this.loopOnce(performance.now() - waitFrom)
      }
    } finally {
      // Stopping: the steps in flight finish (or are cut short at the grace), no next one starts.
      await this.lane.settle()
      await this.flights.settle()
      await this.materialising
    }
  }

  private async loopOnce(waitedForFlightMs: number): Promise<void> {
    const phases = new PassPhases()
    try {
      await this.pass(true, phases)
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
    const elapsed = phases.elapsedMs
    this.opts.observer?.tickDuration?.(elapsed)
    this.slowPass.passEnded(waitedForFlightMs, phases)
    if (this.stateValue !== 'active') return
    if (this.consecutiveErrors > 0) {
      await this.sleep(tickBackoffMs(this.opts.tickMs, this.consecutiveErrors))
    } else if (!this.nudged) {
      await this.sleep(await this.untilNextWake(Math.max(0, this.opts.tickMs - elapsed)))
    }
    this.nudged = false
  }

  /** The sleep after a good tick, aimed at the soonest wake-up ahead (nextWake.ts). */
  private untilNextWake(tickWait: number): Promise<number> {
    return untilNextWake(
      this.opts,
      this.instanceId,
      { dueCheckedAt: this.dueCheckedAt, tickWait },
      { reset: () => (this.wakeHint = null), soonest: () => this.wakeHint },
    )
  }

  private async sleep(ms: number): Promise<void> {
    // A nudge or a stop that came while the wait was being worked out (no sleep
    // to end yet) still counts: a stop would otherwise wait out a whole tick.
    if (ms <= 0 || this.nudged || this.stateValue !== 'active') return
    await this.sleeper.sleep(ms)
  }

  /**
   * A flight let runs go with these wake times (a timer's end): a sleep aimed
   * later ends at the soonest of them instead, so a wait that ends between
   * two ticks ends on time even when its run was let go after the sleep was
   * worked out.
   */
  private wakeBy(wakeAts: readonly Date[]): void {
    this.lane.wakeAt(wakeAts)
    let soonest = Number.POSITIVE_INFINITY
    for (const d of wakeAts) soonest = Math.min(soonest, d.getTime())
    this.wakeHint = Math.min(this.wakeHint ?? Number.POSITIVE_INFINITY, soonest)
    this.sleeper.endWithin(Math.max(0, soonest - this.opts.clock.now().getTime() + 1))
  }

  /**
   * One pass, advancing everything it claimed before it returns. Public so
   * tests can drive the runner tick by tick with an injected clock.
   */
  async tick(): Promise<void> {
    await this.pass(false)
  }

  /**
   * One pass. `inFlight` (the running loop): the advance of what it claimed
   * goes on as a flight (flights.ts) and the pass returns once its claims and
   * sweeps are done, so the next pass can take what comes due meanwhile.
   */
  private async pass(inFlight: boolean, phases = new PassPhases()): Promise<void> {
    const { db, clock } = this.opts
    // A definition changed: materialise first, its runs may be due now. The
    // periodic pass (and a dense schedule's refill) waits until the due runs
    // have started, so it never makes them late.
    // A running loop materialises beside its passes (materialiseAside), so a
    // definition's thousands of runs ahead never hold back the runs due now.
    const requested = this.housekeeping.materialiseRequestedNow
    if (requested && inFlight) this.materialiseAside()
    else if (requested) await this.housekeeping.materialiseIfDue(clock.now())
    phases.mark('materialiseFirst')
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
    // Every claim this pass takes is held here and given back in the finally,
    // at its run's answer or, for whatever was not answered (the pass failed
    // part-way), due now. A flight gives back its own when it settles.
    const held = HeldClaims.forRunner(
      this.opts,
      this.instanceId,
      (wakeAts) => this.wakeBy(wakeAts),
      this.nudgeWatch,
    )
    // The advances this pass hands on; their claims are given back once they all settle.
    const flying: Promise<{ err: unknown } | null>[] = []
    try {
      const started = await this.startDue(token, held)
      phases.mark('start')
      const claimed = await runs.claimTickBatch(
        db,
        this.instanceId,
        `${token}:t`,
        leaseUntil,
        now,
        this.opts.batchSize,
      )
      held.hold(claimed)
      phases.mark('claim')
      // A full claim means more in-flight runs are due (a burst of timers running
      // out together): tick again at once rather than after TICK_MS.
      if (claimed.length >= this.opts.batchSize && !this.windingDown) this.nudged = true
      // What was started and leased goes on now, before the sweeps and the keyed
      // claims: a resolved cue's run does not wait for them. Each part of the
      // pass that claimed runs hands them on (flights.ts) or, for tick(), is
      // advanced before the pass goes on.
      const advanceNow = async (ready: ClaimedRun[], inPass = !inFlight) => {
        if (ready.length === 0) return
        // One path for every held run: batches step by step, chunks of it side by side
        // (chunkedAdvance.ts), each run given back as soon as it is let go (advance.ts).
        const advance = advanceInChunks(this.engineDeps(), ready, (run, answer) =>
          held.answer(run.id, answer),
        )
        if (inPass) return advance
        // Its failure is taken at once, so it is never unhandled while the pass goes on.
        flying.push(
          advance.then(
            () => null,
            (err: unknown) => ({ err }),
          ),
        )
      }
      const firstReady = [...(await expandStartingRuns(this.engineDeps(), claimed)), ...started]
      if (inFlight) await advanceNow(firstReady)
      phases.mark('handOff')
      // Lease expiry is judged on the database's clock (sql/leases.ts).
      await this.housekeeping.reclaimIfDue(!inFlight)
      phases.mark('reclaim')
      this.keyed.forget(await this.housekeeping.markMissed(clock.now()))
      phases.mark('missed')
      const keyed = await this.claimKeyed(held, { claimFrom, now, leaseUntil })
      // Keyed runs advance within the pass, as before: their keys are free
      // again when it ends, so the next pass starts the next run of each key
      // instead of finding it held and deferring it. tick(): everything still
      // held advances together, as one batch.
      const still = new Set(held.holding)
      if (inFlight) await advanceNow(keyed, true)
      else await advanceNow([...firstReady.filter((r) => still.has(r.id)), ...keyed])
      phases.mark('keyed')
    } finally {
      if (flying.length === 0) await held.giveBack()
      else this.flights.launch(settleAll(flying).finally(() => held.giveBack()))
      phases.mark('giveBack')
    }
    if (!requested && inFlight) this.materialiseAside()
    else if (!requested) {
      // Runs it made that are due already start on a pass at once; later ones are the sleep's aim.
      const made = await this.housekeeping.materialiseIfDue(clock.now())
      if (made > 0 && !this.windingDown) this.nudged = true
    }
    phases.mark('materialise')
    await this.housekeeping.retentionIfDue(clock.now())
    phases.mark('retention')
    const lag = this.lastTickAt ? Math.max(0, Date.now() - this.lastTickAt.getTime() - this.opts.tickMs) : 0
    this.opts.observer?.tickLag?.(lag)
    await this.housekeeping.beat(lag)
    phases.mark('heartbeat')
    this.lastTickAt = new Date()
  }

  /** Start due key-less runs, a batch per transaction (start.ts); answers those left claimed for the rest of their program. */
  private async startDue(token: string, held: HeldClaims): Promise<ClaimedRun[]> {
    const pass = await startKeylessDue(this.engineDeps(), {
      token: `${token}:s`,
      batchSize: this.opts.batchSize,
      concurrency: this.opts.startConcurrency,
      onFailed: (runId, reason) =>
        this.opts.logger.error(
          { runId, instance: this.instanceId, reason },
          'a run could not be started; it failed',
        ),
      hold: (runs) => held.hold(runs),
    })
    // A backlog is left: tick again at once rather than after the tick interval.
    if (pass.backlog && !this.windingDown) this.nudged = true
    return pass.handOff
  }

  /**
   * Claim due keyed runs (one by one), held by `held`, and answer them ready
   * to advance. When that took long, every claim of the pass is renewed
   * first, and what is no longer ours is dropped.
   */
  private async claimKeyed(
    held: HeldClaims,
    at: { claimFrom: number; now: Date; leaseUntil: Date },
  ): Promise<ClaimedRun[]> {
    const { claimFrom, now, leaseUntil } = at
    // Keyed runs and runs under an overlap policy, one by one (keyedStart.ts).
    let keyed = await this.keyed.claimDue(now, leaseUntil, this.opts.batchSize, (run) => held.hold([run]))
    if (keyed.length === 0) return []
    // The keyed loop can be long (a transaction per due keyed run): past a
    // third of the lease, renew what the pass holds (held.ts).
    if (Date.now() - claimFrom > this.opts.leaseMs / 3) {
      const mine = await held.renewAll(this.opts.leaseMs)
      keyed = keyed.filter((r) => mine.has(r.id))
    }
    return expandStartingRuns(this.engineDeps(), keyed)
  }

  /**
   * Materialise (when asked, or when the interval or a refill is due) beside
   * the passes, one at a time: the runs it makes that are due now start at
   * the pass its end nudges; a request made meanwhile is taken then too. A
   * failure is logged and counted like a failed tick.
   */
  private materialiseAside(): void {
    if (this.materialising) return
    this.materialising = (async () => {
      try {
        const made = await this.housekeeping.materialiseIfDue(this.opts.clock.now())
        if ((made > 0 || this.housekeeping.materialiseRequestedNow) && !this.windingDown) this.nudge()
      } catch (err) {
        this.opts.observer?.tickError?.()
        this.opts.logger.error(
          { err, instance: this.instanceId, databaseUnavailable: isDbUnavailable(err) },
          'materialisation failed; tried again at the next pass',
        )
      } finally {
        this.materialising = null
      }
    })()
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
