/**
 * The runner's doorbell: beside its passes, a running runner waits on a
 * database connection of its own (sql/doorbell.ts), so that an instance
 * without a runner (`RUNNER=off`) that made a run due, an answered cue above
 * all, wakes it at once instead of at its next tick. A co-hosted runner is
 * nudged in-process and never needs it.
 *
 * Its address (connection id and server) goes out with each heartbeat. A ring
 * nudges the runner (its loop and its wake lane). A lost connection is opened
 * again with a growing pause; meanwhile the runner still wakes at its ticks,
 * so a broken doorbell makes a GO up to a tick late, never lost.
 *
 * What a ring may miss: one that comes while the doorbell is between two
 * sleeps (after one ended, before the next began) ends nothing. It came after
 * the previous ring, whose nudge is still making its claim, or it waits for
 * the next tick at worst.
 */
import type { Db } from '../../sql/db.ts'
import { type DoorbellConnection, openDoorbell, ringOnServer } from '../../sql/doorbell.ts'
import type { DoorbellAddress } from '../../sql/runnerHeartbeats.ts'
import { LoopSleep } from './loopSleep.ts'
import type { RunnerLogger } from './options.ts'

/** A sleep's length: one statement a minute on an idle instance. */
const SLEEP_SECONDS = 60
/** The first pause after a failure; it doubles up to {@link MAX_RETRY_MS}. */
const FIRST_RETRY_MS = 500
const MAX_RETRY_MS = 30_000

export interface DoorbellDeps {
  db: Db
  /** Called on each ring. */
  onRing: () => void
  /** Called with the new address each time a connection is opened (the first, and after a loss). */
  onOpen?: (address: DoorbellAddress) => void
  logger: RunnerLogger
  instanceId: string
  /** What its log lines say when it loses its connection, and what that costs (the runner's by default). */
  lostMessage?: string
}

const RUNNER_LOST =
  "the runner's doorbell lost its connection: instances without a runner wake it at its next tick until it is back"

export class Doorbell {
  private bell: DoorbellConnection | null = null
  private stopping = false
  private loopDone: Promise<void> | null = null
  private readonly pause = new LoopSleep()
  private ringCount = 0

  constructor(private readonly deps: DoorbellDeps) {}

  /** Where to ring it now; null while it has no connection. */
  get address(): DoorbellAddress | null {
    return this.bell ? { connectionId: this.bell.connectionId, server: this.bell.server } : null
  }

  /** Rings heard so far. */
  get rings(): number {
    return this.ringCount
  }

  start(): void {
    this.loopDone ??= this.listen()
  }

  /**
   * Stop listening: a sleep under way is rung to an end and the connection
   * closed. Answers the statements that took on `db` (the look, and the kill
   * if it was asleep), for callers that count theirs.
   */
  async stop(): Promise<number> {
    this.stopping = true
    this.pause.wake()
    const bell = this.bell
    const sent = { statements: 0 }
    if (bell) {
      await ringOnServer(this.deps.db, bell, sent).catch((err: unknown) => {
        this.deps.logger.warn(
          { err, instance: this.deps.instanceId },
          "could not end the doorbell's sleep; the server ends it within a minute",
        )
      })
    }
    await this.loopDone
    return sent.statements
  }

  private async listen(): Promise<void> {
    let failures = 0
    while (!this.stopping) {
      try {
        if (!this.bell) {
          this.bell = await openDoorbell(this.deps.db)
          if (failures > 0) this.deps.logger.info({ instance: this.deps.instanceId }, 'the doorbell is back')
          failures = 0
          this.deps.onOpen?.({ connectionId: this.bell.connectionId, server: this.bell.server })
        }
        const rung = await this.bell.wait(SLEEP_SECONDS)
        if (rung && !this.stopping) {
          this.ringCount++
          this.deps.onRing()
        }
      } catch (err) {
        await this.hangUp()
        if (this.stopping) break
        failures++
        if (failures === 1) {
          this.deps.logger.warn({ err, instance: this.deps.instanceId }, this.deps.lostMessage ?? RUNNER_LOST)
        }
        await this.pause.sleep(Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (failures - 1)))
      }
    }
    await this.hangUp()
  }

  private async hangUp(): Promise<void> {
    const bell = this.bell
    this.bell = null
    await bell?.end()
  }
}
