/**
 * How an instance without a runner (`RUNNER=off`) wakes the runners when it
 * made a run due (an answered cue, a started or retried run): it rings their
 * doorbells (src/runner/doorbell.ts, sql/doorbell.ts), found through their
 * heartbeats. Without it such a GO waited for the runner's next tick, up to
 * `TICK_MS` (the showtime benchmark's split topology: GO p99 about 1 s).
 *
 * Rings are merged: while one is under way, any number asked for meanwhile
 * make one more after it, so a burst of answers costs a ring per round trip,
 * not one each. The doorbells are read at most every {@link BELLS_TTL_MS}, and
 * at once after one was gone. A failure to ring is logged once per spell of
 * failures; the runners still wake at their ticks.
 */
import type { Db } from '../sql/db.ts'
import { ringOnServer } from '../sql/doorbell.ts'
import { type DoorbellAddress, liveDoorbells } from '../sql/runnerHeartbeats.ts'
import type { Logger } from './log.ts'

/** How long the list of doorbells is trusted before it is read again. */
const BELLS_TTL_MS = 2000

export interface DoorbellRingerDeps {
  /** The pool it reads the doorbells and rings on (the API's, for the runners' doorbells). */
  db: Db
  logger: Pick<Logger, 'warn' | 'info'>
  /** A runner whose heartbeat is older than this is not rung (LEASE_MS: others take its runs by then). */
  freshMs: number
  now?: () => number
  /**
   * Which doorbells to ring: those renewed since `since`. @default the live
   * runners' (runner_heartbeats); the inboxes' are rung with the same ringer
   * (src/api/inboxBell.ts).
   */
  bells?: (db: Db, since: Date) => Promise<DoorbellAddress[]>
  /** Whose doorbells, for the log lines. @default "runners'" */
  whose?: { failed: string; back: string }
}

const RUNNERS: NonNullable<DoorbellRingerDeps['whose']> = {
  failed: "could not ring the runners' doorbells: runs made due here start at the runners' next tick",
  back: "runners' doorbells can be rung again",
}

export class DoorbellRinger {
  private bells: { list: DoorbellAddress[]; readAt: number } | null = null
  private ringing: Promise<void> | null = null
  private again = false
  private failing = false

  constructor(private readonly deps: DoorbellRingerDeps) {}

  /** Wake every live runner on this database soon; never throws. */
  ring(): void {
    if (this.ringing) {
      this.again = true
      return
    }
    this.ringing = this.ringAll().finally(() => {
      this.ringing = null
      if (this.again) {
        this.again = false
        this.ring()
      }
    })
  }

  /** The ring under way, if any (tests, a stopping server). */
  async settled(): Promise<void> {
    while (this.ringing) await this.ringing
  }

  private async ringAll(): Promise<void> {
    try {
      const bells = await this.liveBells()
      const answers = await Promise.all(bells.map((bell) => ringOnServer(this.deps.db, bell)))
      // A runner that reconnected or stopped: its new address is in its next heartbeat.
      if (answers.includes('gone')) this.bells = null
      if (this.failing) this.deps.logger.info({}, (this.deps.whose ?? RUNNERS).back)
      this.failing = false
    } catch (err) {
      this.bells = null
      if (!this.failing) {
        this.deps.logger.warn({ err }, (this.deps.whose ?? RUNNERS).failed)
      }
      this.failing = true
    }
  }

  private async liveBells(): Promise<DoorbellAddress[]> {
    const now = (this.deps.now ?? Date.now)()
    if (this.bells && now - this.bells.readAt < BELLS_TTL_MS) return this.bells.list
    const list = await (this.deps.bells ?? liveDoorbells)(this.deps.db, new Date(now - this.deps.freshMs))
    this.bells = { list, readAt: now }
    return list
  }
}
