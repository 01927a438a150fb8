/**
 * The claims one pass of the runner holds, and where they are given back. A
 * run is held from the moment its claim is taken (a start, a lease, a keyed
 * claim) until it is answered (advance.ts says when it next needs the
 * runner) or the pass ends: `giveBack()`, in the tick's `finally`, releases
 * whatever was not answered, due now, whether the pass finished or failed.
 *
 * A run parked on a person is given back by the write that parks it
 * (executor/writer.ts), free the moment its cue can be seen; its answer
 * only tells these claims so. Other answered runs are released as their
 * answers come, not when the whole pass ends, and set-wise like a group
 * commit: what is answered while one release is being written goes in the
 * next, so a batch's runs let go together cost one statement, and a run let
 * go early is not held back by a slow straggler.
 *
 * Held claims are kept alive: every third of `LEASE_MS` while any run is
 * held, their leases are renewed to at least `LEASE_MS` from then. A round
 * begins all its steps at once and they take `RUNNER_PARALLELISM` places in
 * turn, so a step may wait far longer than its own timeout before it even
 * starts (two thousand webhooks of a few seconds each, 32 at a time); a
 * lease sized once per round ran out under it, and the next claim called the
 * webhook again. Only a database out of reach for a whole lease lets a held
 * claim lapse now.
 */
import type { Db } from '../../sql/db.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { Clock } from './clock.ts'
import type { ResolvedOptions, RunnerLogger } from './options.ts'
import type { RunAnswer, RunnerObserver } from './types.ts'

/** The runner's nudges so far, and how to wake its lane (see `nudged` below). */
export interface NudgeWatch {
  count: () => number
  wake: () => void
}

export class HeldClaims {
  /** Held and not yet answered. */
  private readonly open = new Set<number>()
  private queue: Release[] = []
  private draining: Promise<void> | null = null
  /** Renews the held claims while any is held (see above). */
  private keeper: ReturnType<typeof setInterval> | null = null
  private keeping: Promise<void> | null = null

  constructor(
    private readonly deps: {
      db: Db
      owner: string
      clock: Clock
      logger: RunnerLogger
      observer?: RunnerObserver
      /** How long a run whose advance failed waits before it is tried again. */
      retryAfterMs: number
      /**
       * Told, once their release is written, of the wake times the runs' own
       * answers asked for (a timer's end, a budget spent): the runner aims its
       * sleep at them. Not told of stops, errors or parked runs.
       */
      released?: (wakeAts: readonly Date[]) => void
      /**
       * How many nudges (a cue answered, a run resumed) the runner has had,
       * and how to wake its lane. A person can act on a run while it is
       * still held (a cue answered between its ladder's opening and its
       * park's write): the act pulls `wake_at` to now and the give-back
       * keeps it (`woken_while_claimed`), but the nudge came while the run
       * was claimed and found nothing to take. So a parked run given back
       * after any nudge since these claims were taken wakes the lane;
       * otherwise such a GO waited for the next tick.
       */
      nudged?: NudgeWatch
      /** The lease to keep held claims alive for, renewed every third of it; unset: not kept alive. */
      leaseMs?: number
    },
  ) {
    this.nudgesAtStart = deps.nudged?.count() ?? 0
  }

  /** The runner's nudge count when these claims began to be taken. */
  private nudgesAtStart: number

  /** A runner's claims (a pass's, the wake lane's): its options, failed runs tried again after a tick. */
  static forRunner(
    opts: Pick<ResolvedOptions, 'db' | 'clock' | 'logger' | 'observer' | 'tickMs' | 'leaseMs'>,
    owner: string,
    released: (wakeAts: readonly Date[]) => void,
    nudged?: NudgeWatch,
  ): HeldClaims {
    const { db, clock, logger, observer, tickMs, leaseMs } = opts
    return new HeldClaims({
      db,
      owner,
      clock,
      logger,
      observer,
      retryAfterMs: tickMs,
      released,
      nudged,
      leaseMs,
    })
  }

  /** These runs' claims were just taken by this pass. */
  hold(held: readonly { id: number }[]): void {
    for (const r of held) this.open.add(r.id)
    this.keepAlive()
  }

  /** Renew the held claims every third of the lease while any is held. */
  private keepAlive(): void {
    const { leaseMs } = this.deps
    if (leaseMs === undefined || this.keeper !== null || this.open.size === 0) return
    this.keeper = setInterval(() => this.renewHeld(leaseMs), Math.max(10, Math.floor(leaseMs / 3)))
    // Held claims alone do not keep a process alive: its stop gives them back.
    this.keeper.unref?.()
  }

  private stopKeepingAlive(): void {
    if (this.keeper !== null) clearInterval(this.keeper)
    this.keeper = null
  }

  private renewHeld(leaseMs: number): void {
    if (this.open.size === 0) {
      this.stopKeepingAlive()
      return
    }
    // One renewal at a time: a slow database does not pile them up.
    if (this.keeping) return
    const { db, owner, clock, logger } = this.deps
    const now = clock.now()
    const ids = [...this.open]
    this.keeping = runs
      .keepClaims(db, ids, owner, new Date(now.getTime() + leaseMs), now)
      .then(
        () => undefined,
        (err: unknown) =>
          logger.warn(
            { err, runIds: ids.slice(0, 20), held: ids.length },
            'could not renew held claims; tried again in a third of the lease',
          ),
      )
      .finally(() => {
        this.keeping = null
      })
  }

  /**
   * Hold `taken`, held by `from` until now: `from` lets go of them without
   * giving them back, and these claims count nudges from the earlier start
   * of the two, so a nudge `from` would have heeded is not missed.
   */
  takeOver(from: HeldClaims, taken: readonly { id: number }[]): void {
    from.drop(taken.map((r) => r.id))
    this.nudgesAtStart = Math.min(this.nudgesAtStart, from.nudgesAtStart)
    this.hold(taken)
  }

  /** These runs' claims were lost (taken over after they expired): not ours to give back. */
  drop(ids: Iterable<number>): void {
    for (const id of ids) this.open.delete(id)
  }

  /** The runs held and not yet answered. */
  get holding(): number[] {
    return [...this.open]
  }

  /**
   * Renew every claim held for `leaseMs` more (a long pass: a claim taken at
   * its start may have run out and been taken over by another instance) and
   * drop what is no longer ours, or two instances would advance one run.
   * Answers the runs still held.
   */
  async renewAll(leaseMs: number): Promise<Set<number>> {
    const { db, owner, clock } = this.deps
    const from = clock.now()
    const mine = await runs.renewClaims(db, this.holding, owner, new Date(from.getTime() + leaseMs), from)
    this.drop(this.holding.filter((id) => !mine.has(id)))
    return mine
  }

  /** A run is let go: give its claim back, due when `answer` says (`stop`: as it is, due now). */
  answer(id: number, answer: RunAnswer): void {
    if (!this.open.delete(id)) return
    if (this.open.size === 0) this.stopKeepingAlive()
    if ('givenBack' in answer) {
      this.givenBack(answer.wakeAt)
      return
    }
    const { clock } = this.deps
    let wakeAt: Date | null
    const asked = 'wakeAt' in answer && answer.wakeAt !== null
    if ('error' in answer) {
      this.deps.observer?.tickError?.()
      this.deps.logger.error(
        { err: answer.error, runId: id, instance: this.deps.owner },
        'advancing a run failed; it will be retried',
      )
      // After a tick rather than at once, so a persistent error does not spin.
      wakeAt = new Date(clock.now().getTime() + this.deps.retryAfterMs)
    } else wakeAt = 'stop' in answer ? clock.now() : answer.wakeAt
    this.queue.push({ id, wakeAt, asked })
    // Answers that arrive together (a round's) are collected before the first release is written.
    this.draining ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.drain())
  }

  /**
   * A run parked on a person whose claim its park's own write gave back: as a
   * release of it would, aim the runner's sleep at its timeout, and wake the
   * lane if the runner was nudged while it was held (a GO between the cue's
   * first entry and its park's commit pulled `wake_at` to now, and the give-back kept it).
   */
  private givenBack(wakeAt: Date | null): void {
    if (wakeAt !== null) this.deps.released?.([wakeAt])
    this.wakeLaneIfNudged()
  }

  /** Wake the lane if the runner was nudged since these claims began (see `nudged`). */
  private wakeLaneIfNudged(): void {
    const nudged = this.deps.nudged
    if (nudged && nudged.count() !== this.nudgesAtStart) nudged.wake()
  }

  /** The end of the pass: give back every claim still held, due now, and wait for every release. */
  async giveBack(): Promise<void> {
    this.stopKeepingAlive()
    const now = this.deps.clock.now()
    for (const id of this.open) this.queue.push({ id, wakeAt: now, asked: false })
    this.open.clear()
    while (this.draining) await this.draining
    if (this.queue.length > 0) await this.drain()
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue
        this.queue = []
        await this.release(batch)
      }
    } finally {
      this.draining = null
    }
  }

  private async release(batch: Release[]): Promise<void> {
    const { db, owner } = this.deps
    try {
      const first = batch[0]?.wakeAt ?? null
      // One wake time for all (a stop, a budget spent, a round of timers alike): no CASE needed.
      if (batch.every((r) => (r.wakeAt?.getTime() ?? null) === (first?.getTime() ?? null)))
        await runs.releaseClaims(
          db,
          batch.map((r) => r.id),
          owner,
          first,
        )
      else await runs.releaseClaimsAt(db, batch, owner)
      const asked = batch.filter((r) => r.asked && r.wakeAt !== null).map((r) => r.wakeAt as Date)
      if (asked.length > 0) this.deps.released?.(asked)
      if (batch.some((r) => r.wakeAt === null)) this.wakeLaneIfNudged()
    } catch (err) {
      this.deps.logger.warn(
        { err, runIds: batch.map((r) => r.id) },
        'could not release claims; they will expire and be reclaimed',
      )
    }
  }
}

/** A claim to give back: when its run is due again, and whether its own answer asked for that time. */
interface Release {
  id: number
  wakeAt: Date | null
  asked: boolean
}
