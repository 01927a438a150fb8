/**
 * The wake lane: runs in flight made due now (a cue answered, a paused run
 * resumed, a retry asked for) or coming due at a timer's end are claimed and
 * advanced here, beside the runner's passes, not by the next pass.
 *
 * Why: under load a pass lasts a hundred milliseconds and more (its starts,
 * claims, sweeps, keyed claims, heartbeat, each statement some 10 ms on a
 * busy database), and a nudge or a timer that comes while one is under way
 * waited for all of it, then for the next pass's starts, before its run was
 * claimed: that wait was most of a loaded GO (docs/performance.md, "GO and
 * timers (third round)"). The lane claims with the same guarded statement
 * as a pass (`claimTickBatch`: a live claim is not re-enterable, so a run the
 * lane and a pass both see due is taken by one of them only) and hands the
 * batch to a flight of its own, so it never waits for a pass, nor for a slot
 * behind the passes' batches of slow webhooks.
 *
 * Bounded: one claim at a time (answers that arrive meanwhile are taken
 * together by the next one, like a group commit; runs an answer handed over
 * while a claim is under way ride in its batch), at most
 * `wakeBatchesInFlight` batches of its own in flight (4 × `batchesInFlight`
 * by default: its batches are small and many), and it claims only while the
 * runner is active. A
 * stopping runner waits for `settle()`: the claim under way, then every
 * batch of the lane, each giving its claims back.
 *
 * Timers are claimed ahead: `timerLeadMs` (150 ms by default) before a timer
 * ends, the lane claims the runs whose timers end with it (within
 * TIMER_GROUP_MS) and holds them until the end comes (timerGroups.ts), so
 * the claim's round trips are behind the timer, not after it. Under load
 * the claim was a third of a 2 s wait's overshoot (docs/performance.md,
 * seventeenth round). A step never starts early: a group is advanced only
 * once the runner's clock reads its last timer's end, and its round checks
 * each step's time as any round does.
 */

import { setTimeout as sleep } from 'node:timers/promises'
import type { AnswerClaim, LeasedRun } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import { advanceBatch, type FirstRound } from './advance.ts'
import { expandStartingRuns } from './expand.ts'
import { type Flights, loggedFlights } from './flights.ts'
import type { RunHandOff } from './handOff.ts'
import { HeldClaims, type NudgeWatch } from './held.ts'
import type { ResolvedOptions } from './options.ts'
import { DEFAULT_STEP_NEED_MS, roundLeaseMs } from './roundLease.ts'
import { groupByDue, TIMER_GROUP_MS } from './timerGroups.ts'
import type { EngineDeps } from './types.ts'

/** Timer ends the lane remembers at once; later ones are the runner's sleep's (it reads the soonest wake_at). */
const MAX_TIMERS = 256

export interface WakeLaneDeps {
  opts: ResolvedOptions
  instanceId: string
  engine: () => EngineDeps
  /** True while the runner may claim (active, not stopping). */
  active: () => boolean
  /** A claim token, unique per claim of this instance. */
  token: () => string
  /** Released runs asked to be woken at these times (a timer's end). */
  released: (wakeAts: readonly Date[]) => void
  /** The runner's nudges so far, and how to wake this lane after a nudged release (held.ts). */
  nudged?: NudgeWatch
}

/** Runs answers claimed for this lane, waiting together for a place, their claims held. */
interface Forming {
  items: { run: LeasedRun; next: StepRow | null; leaseEnds: number }[]
  held: HeldClaims
}

export class WakeLane implements RunHandOff {
  readonly flights: Flights
  /** `wakeBatchesInFlight` 0: no lane, the passes claim woken runs. */
  private readonly off: boolean
  private requested = false
  private draining: Promise<void> | null = null
  /** Timer ends ahead (Date.now() ms, ascending), the soonest armed. */
  private ahead: number[] = []
  private timer: { at: number; handle: ReturnType<typeof setTimeout> } | null = null
  /** The claim asked for takes runs due by this instant too (Date.now() ms; 0: due now only). */
  private claimUntil = 0
  /** Runs claimed before their timers ended, held until they did: tests read it. */
  claimedAheadRuns = 0
  /** Runs the lane claimed so far: tests read it to see which path served a run. */
  claimedRuns = 0
  /** Runs answers handed over so far (handOff.ts), advanced by the lane. */
  adoptedRuns = 0
  /** Hand-overs not yet in a flight, their claims held; a stopping runner waits for `adopting`. */
  private forming: Forming | null = null
  private adopting: Promise<void> | null = null
  /** The lane's claim under way, if any: hand-overs waiting to launch ride in its batch (claimOnce). */
  private claiming: Promise<void> | null = null
  /** Of the runs answers handed over, those that rode in a batch of the lane's own claim. */
  riddenRuns = 0

  constructor(private readonly deps: WakeLaneDeps) {
    const { opts, instanceId } = deps
    this.off = opts.wakeBatchesInFlight === 0
    this.flights = loggedFlights(
      Math.max(1, opts.wakeBatchesInFlight),
      opts,
      instanceId,
      'advancing a woken batch failed; its runs are given back and tried again',
    )
  }

  /** A run in flight was made due now: claim what is due as soon as the claim under way (if any) ends. */
  wake(): void {
    if (this.off || !this.deps.active()) return
    this.requested = true
    this.draining ??= this.drain()
  }

  /** Runs were let go to be due at these times (runner's clock): claim at the soonest. */
  wakeAt(wakeAts: readonly Date[]): void {
    if (this.off || !this.deps.active()) return
    const skew = Date.now() - this.deps.opts.clock.now().getTime()
    for (const d of wakeAts) {
      // +1 ms: a timer can fire a little early, and the due query is `wake_at <= now`.
      const at = d.getTime() + skew + 1
      if (this.ahead.includes(at)) continue
      this.ahead.push(at)
    }
    this.ahead.sort((a, b) => a - b)
    if (this.ahead.length > MAX_TIMERS) this.ahead.length = MAX_TIMERS
    this.arm()
  }

  /** Stop claiming; resolves once the claim under way and every batch of the lane have settled. */
  async settle(): Promise<void> {
    if (this.timer) clearTimeout(this.timer.handle)
    this.timer = null
    this.ahead = []
    this.requested = false
    await this.draining
    while (this.adopting) await this.adopting
    await this.flights.settle()
  }

  /**
   * A claim for a cue's answer to take on its run in the answer's
   * transaction (handOff.ts), or null while this lane takes none (off, or
   * the runner not active). Claimed for as long as a woken batch is.
   */
  claim(): AnswerClaim | null {
    if (this.off || !this.deps.active()) return null
    const now = this.deps.opts.clock.now()
    return { owner: this.deps.instanceId, token: this.deps.token(), leaseUntil: this.leaseFrom(now), now }
  }

  /**
   * Where a woken run's claim ends, a lane claim's or an answer's: as long as
   * a round of default steps needs, with room to spare, so the first round
   * begins its steps without renewing (roundLease.ts).
   */
  private leaseFrom(now: Date): Date {
    return new Date(now.getTime() + roundLeaseMs(this.deps.opts.leaseMs, DEFAULT_STEP_NEED_MS))
  }

  /**
   * Advance runs `held` holds in a flight of the lane, their claims given
   * back as the batch answers them and whatever is left when it settles;
   * with `at`, once the runner's clock reads `at` (ms), not before. A runner
   * stopped meanwhile gives them back unadvanced, due then.
   */
  private launch(held: HeldClaims, ready: readonly LeasedRun[], first: FirstRound, at?: number): void {
    const advance = async () => {
      if (at !== undefined) {
        const { clock } = this.deps.opts
        for (let left = at - clock.now().getTime(); left > 0; left = at - clock.now().getTime())
          await sleep(left)
        if (!this.deps.active()) return
      }
      await advanceBatch(this.deps.engine(), ready, (run, answer) => held.answer(run.id, answer), first)
    }
    this.flights.launch(advance().finally(() => held.giveBack()))
  }

  /**
   * A run an answer claimed under {@link claim}, as the answer read it, with
   * its next step (null: none left): advanced with no lease and no read of
   * its own. Its claim is held (kept alive) from now.
   */
  adopt(run: LeasedRun, next: StepRow | null, claim: AnswerClaim): void {
    this.forming ??= { items: [], held: this.newHeld() }
    this.forming.items.push({ run, next, leaseEnds: claim.leaseUntil.getTime() })
    this.forming.held.hold([run])
    this.startAdopting()
  }

  private newHeld(): HeldClaims {
    return HeldClaims.forRunner(
      this.deps.opts,
      this.deps.instanceId,
      (wakeAts) => this.deps.released(wakeAts),
      this.deps.nudged,
    )
  }

  private startAdopting(): void {
    if (this.adopting) return
    this.adopting = this.drainAdopted().finally(() => {
      this.adopting = null
      if (this.forming) this.startAdopting()
    })
  }

  /**
   * One hand-over batch at a time, like the lane's claims: what is handed
   * over while a batch waits for a place in the lane's flights goes in the
   * next one. Batches of one each took a place of their own, and under load
   * the GOs queued for places (docs/performance.md, fourteenth round).
   */
  private async drainAdopted(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve))
    while (this.forming) {
      if (this.deps.active()) await this.flights.slot()
      // A claim of the lane's under way takes them into its batch (claimOnce): one
      // batch's rounds where there were two. If it fails first, they go on their own.
      if (this.claiming) {
        await this.claiming
        continue
      }
      const batch = this.forming
      if (!batch) break
      this.forming = null
      await this.advanceAdopted(batch)
    }
  }

  /** The hand-overs waiting to launch, taken to ride in a batch of the lane's claim; their claims move to `held`. */
  private takeRiders(held: HeldClaims): Forming['items'] {
    const riders = this.forming
    if (!riders || !this.deps.active()) return []
    this.forming = null
    held.takeOver(
      riders.held,
      riders.items.map((a) => a.run),
    )
    this.riddenRuns += riders.items.length
    this.adoptedRuns += riders.items.length
    return riders.items
  }

  /** Advance a batch of handed-over runs in a flight of the lane; given back, due now, if the runner stopped meanwhile. */
  private async advanceAdopted({ items, held }: Forming): Promise<void> {
    let launched = false
    try {
      if (!this.deps.active()) return
      this.adoptedRuns += items.length
      this.launch(
        held,
        items.map((a) => a.run),
        {
          fresh: true,
          nextSteps: new Map(items.map((a) => [a.run.id, a.next])),
          leaseEnds: Math.min(...items.map((a) => a.leaseEnds)),
        },
      )
      launched = true
    } finally {
      if (!launched) await held.giveBack()
    }
  }

  private arm(): void {
    const soonest = this.ahead[0]
    if (soonest === undefined) return
    if (this.timer && this.timer.at <= soonest) return
    if (this.timer) clearTimeout(this.timer.handle)
    const lead = this.deps.opts.timerLeadMs
    const handle = setTimeout(() => this.fire(), Math.max(0, soonest - lead - Date.now()))
    this.timer = { at: soonest, handle }
  }

  /** The soonest timer is `timerLeadMs` away (or past): claim it, and those ending with it. */
  private fire(): void {
    const soonest = this.timer?.at ?? Date.now()
    this.timer = null
    const now = Date.now()
    const until = this.deps.opts.timerLeadMs > 0 ? Math.max(now, soonest + TIMER_GROUP_MS) : now
    this.ahead = this.ahead.filter((at) => at > until)
    if (until > now) this.claimUntil = Math.max(this.claimUntil, until)
    this.wake()
    this.arm()
  }

  private async drain(): Promise<void> {
    try {
      while (this.requested && this.deps.active()) {
        this.requested = false
        const until = this.claimUntil
        this.claimUntil = 0
        // A batch's slot first: the claim's leases start running as soon as it is taken.
        await this.flights.slot()
        if (!this.deps.active()) break
        try {
          await this.claimOnce(until)
        } catch (err) {
          // The pass claims the same runs at its next turn: nothing is lost.
          this.deps.opts.observer?.tickError?.()
          this.deps.opts.logger.error(
            { err, instance: this.deps.instanceId },
            'claiming woken runs failed; the next pass takes them',
          )
        }
      }
    } finally {
      this.draining = null
    }
  }

  /** Claim the in-flight runs due now and hand them, with the hand-overs waiting meanwhile, to a flight of the lane. */
  private async claimOnce(until: number): Promise<void> {
    const claim = this.claimAndLaunch(until)
    this.claiming = claim.then(
      () => undefined,
      () => undefined,
    )
    try {
      await claim
    } finally {
      this.claiming = null
    }
  }

  /** `until`: also claim runs due by then (Date.now() ms), timers ending a moment from now; 0: due now only. */
  private async claimAndLaunch(until: number): Promise<void> {
    const { opts, instanceId } = this.deps
    const { db, clock } = opts
    const now = clock.now()
    const dueBy = new Date(Math.max(now.getTime(), until - (Date.now() - now.getTime())))
    const leaseUntil = this.leaseFrom(now)
    const held = this.newHeld()
    let launched = false
    try {
      // Each run read with its next step: a round trip fewer between a GO and that step.
      const { runs: claimed, nextSteps } = await runs.claimTickBatchWithSteps(
        db,
        instanceId,
        this.deps.token(),
        leaseUntil,
        now,
        opts.batchSize,
        dueBy,
      )
      held.hold(claimed)
      this.claimedRuns += claimed.length
      // More are due than one claim takes: claim again at once, as far ahead.
      if (claimed.length >= opts.batchSize) {
        this.requested = true
        this.claimUntil = Math.max(this.claimUntil, until)
      }
      const expanded = claimed.length > 0 ? await expandStartingRuns(this.deps.engine(), claimed) : []
      const { now: ready, later } = groupByDue(expanded, nextSteps, clock.now().getTime(), dueBy.getTime())
      for (const group of later) {
        const groupHeld = this.newHeld()
        groupHeld.takeOver(held, group.runs)
        this.claimedAheadRuns += group.runs.length
        this.launch(
          groupHeld,
          group.runs,
          { fresh: true, nextSteps, leaseEnds: leaseUntil.getTime() },
          group.at,
        )
      }
      const riders = this.takeRiders(held)
      if (ready.length + riders.length === 0) return
      for (const r of riders) nextSteps.set(r.run.id, r.next)
      // Read by the claim (or the answers) a moment ago: the first round takes their statuses and steps as read.
      this.launch(held, [...ready, ...riders.map((r) => r.run)], {
        fresh: true,
        nextSteps,
        leaseEnds: Math.min(leaseUntil.getTime(), ...riders.map((r) => r.leaseEnds)),
      })
      launched = true
    } finally {
      if (!launched) await held.giveBack()
    }
  }
}
