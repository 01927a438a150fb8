/**
 * The cue inbox's doorbell: how a cue parked by a runner in another process
 * reaches the subscribers of this one at once rather than at its next poll.
 *
 * A runner wakes its own process's inbox in-process (server.ts, cuesParked).
 * An instance without a runner (`RUNNER=off`), or another full instance,
 * used to learn of the cue at its next inbox poll, up to `STATUS_POLL_MS`
 * later: in the showtime benchmark's split topology, park → owner p99 was
 * 0.7 s against 0.25 s on one instance. So while its inbox has subscribers,
 * an instance keeps a doorbell like the runner's (src/runner/doorbell.ts: a
 * connection asleep in `SELECT SLEEP`), and says where it is in
 * `inbox_doorbells`, renewed every {@link ANNOUNCE_MS}. A runner that parks
 * cues rings the others' doorbells (`KILL QUERY`, merged while one ring is
 * under way, on the inbox's own connection so a ring does not queue behind
 * the runner's statements), and a ring wakes the inbox's poll, which still
 * keeps its least gap between polls.
 *
 * Nobody listening costs nothing: the doorbell is opened with the first
 * subscriber and put away {@link LINGER_MS} after the last one left (a
 * console reconnecting does not churn it). A lost or unrung doorbell costs
 * the poll interval at worst, as before, never a cue.
 */
import type { Db } from '../../sql/db.ts'
import { announce, liveInboxDoorbells, withdraw } from '../../sql/inboxDoorbells.ts'
import type { DoorbellAddress } from '../../sql/runnerHeartbeats.ts'
import { DoorbellRinger } from '../doorbellRinger.ts'
import type { Logger } from '../log.ts'
import { Doorbell } from '../runner/doorbell.ts'
import type { ChangeSignal } from './changeSignal.ts'

/** How often a doorbell in use says again where it is. */
export const ANNOUNCE_MS = 5000
/** A doorbell not renewed for this long is not rung (its instance stopped or lost it). */
export const BELL_FRESH_MS = 3 * ANNOUNCE_MS
/** How long the doorbell stays up after the last subscriber left. */
export const LINGER_MS = 30_000
/** How often it looks whether the inbox has subscribers. */
const CHECK_MS = 1000

export interface InboxBellDeps {
  /** Where the doorbell's address is written, and the pool its sleeping connection is opened beside. */
  db: Db
  instanceId: string
  logger: Logger
  /** Whether the inbox has subscribers now. */
  hasListeners: () => boolean
  /** A ring: look at the inbox now. */
  onRing: () => void
  now?: () => number
  /** @default {@link LINGER_MS} */
  lingerMs?: number
  /** @default 1000 */
  checkMs?: number
}

/** The listening side: this instance's inbox doorbell, up while the inbox has subscribers. */
export class InboxBell {
  private doorbell: Doorbell | null = null
  private address: DoorbellAddress | null = null
  private announcedAt = 0
  private idleSince: number | null = null
  private timer: NodeJS.Timeout | null = null
  private busy: Promise<void> | null = null
  private failing = false
  private stopped = false
  /** The announcement a new connection made, awaited before the doorbell is taken off the list. */
  private announcing: Promise<void> | null = null

  constructor(private readonly deps: InboxBellDeps) {}

  /** Rings heard so far, by every doorbell it has kept (tests). */
  rings = 0
  /** Statements it has sent on `db` (tests that count the feeds' statements leave these out). */
  statements = 0

  /** Whether the doorbell is up and its address known. */
  get listening(): boolean {
    return this.address !== null
  }

  start(): void {
    if (this.timer || this.stopped) return
    this.timer = setInterval(() => this.check(), this.deps.checkMs ?? CHECK_MS)
    this.timer.unref?.()
  }

  /** Look now whether it should be up (a subscriber arrived), rather than within a second. */
  check(): void {
    if (this.stopped || this.busy) return
    this.busy = this.step().finally(() => {
      this.busy = null
    })
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    this.timer = null
    await this.busy
    await this.putAway()
  }

  private async step(): Promise<void> {
    const now = (this.deps.now ?? Date.now)()
    if (this.deps.hasListeners()) {
      this.idleSince = null
      if (!this.doorbell) this.open()
      else if (this.address && now - this.announcedAt >= ANNOUNCE_MS) await this.announce(this.address)
      return
    }
    this.idleSince ??= now
    if (this.doorbell && now - this.idleSince >= (this.deps.lingerMs ?? LINGER_MS)) await this.putAway()
  }

  private open(): void {
    this.doorbell = new Doorbell({
      db: this.deps.db,
      instanceId: this.deps.instanceId,
      logger: this.deps.logger,
      lostMessage:
        "the inbox's doorbell lost its connection: cues parked by other instances reach this one's subscribers at its next poll until it is back",
      onRing: () => {
        this.rings++
        this.deps.onRing()
      },
      onOpen: (address) => {
        this.address = address
        // Said at once, not at the next check: rings can reach it from now on.
        if (!this.stopped) this.announcing = this.announce(address)
      },
    })
    this.doorbell.start()
  }

  private async announce(address: DoorbellAddress): Promise<void> {
    this.announcedAt = (this.deps.now ?? Date.now)()
    this.statements++
    try {
      await announce(this.deps.db, this.deps.instanceId, address)
      if (this.failing) this.deps.logger.info({}, "the inbox's doorbell is announced again")
      this.failing = false
    } catch (err) {
      if (!this.failing) {
        this.deps.logger.warn(
          { err },
          "could not say where the inbox's doorbell is: cues parked elsewhere reach this instance at its next poll",
        )
      }
      this.failing = true
    }
  }

  private async putAway(): Promise<void> {
    const doorbell = this.doorbell
    if (!doorbell) return
    await this.announcing
    this.statements++ // the withdrawal; the doorbell's stop says what its ring took
    this.doorbell = null
    this.address = null
    try {
      await withdraw(this.deps.db, this.deps.instanceId)
    } catch (err) {
      // Left behind, it goes stale and is not rung after BELL_FRESH_MS.
      this.deps.logger.warn(
        { err },
        "could not take the inbox's doorbell off the list; it goes stale on its own",
      )
    }
    this.statements += await doorbell.stop()
  }
}

/** The ringing side, on an instance with a runner: rings the other instances' inbox doorbells. */
export function inboxRinger(deps: { db: Db; instanceId: string; logger: Pick<Logger, 'warn' | 'info'> }) {
  return new DoorbellRinger({
    db: deps.db,
    logger: deps.logger,
    freshMs: BELL_FRESH_MS,
    bells: (db, since) => liveInboxDoorbells(db, since, deps.instanceId),
    whose: {
      failed:
        "could not ring the other instances' inbox doorbells: cues parked here reach their subscribers at their next poll",
      back: "the other instances' inbox doorbells can be rung again",
    },
  })
}

/**
 * This instance's part: its inbox's doorbell, up while the inbox has
 * subscribers, and, where a runner parks cues here, the ringer of the
 * others'. Answers how to stop both.
 */
export function wireInboxDoorbells(deps: {
  /** The inbox's own connection (src/pools.ts). */
  db: Db
  instanceId: string
  logger: Logger
  inbox: { readonly listenerCount: number; wake(): void }
  /** Told when this instance's runner parked cues; null without a runner. */
  cuesParked: ChangeSignal | null
}): { bell: InboxBell; stop(): Promise<void> } {
  const bell = new InboxBell({
    db: deps.db,
    instanceId: deps.instanceId,
    logger: deps.logger,
    hasListeners: () => deps.inbox.listenerCount > 0,
    onRing: () => deps.inbox.wake(),
  })
  bell.start()
  const ringer = deps.cuesParked ? inboxRinger(deps) : null
  const unlisten = ringer ? deps.cuesParked?.on(() => ringer.ring()) : undefined
  return {
    bell,
    async stop() {
      unlisten?.()
      await Promise.all([bell.stop(), ringer?.settled()])
    },
  }
}
