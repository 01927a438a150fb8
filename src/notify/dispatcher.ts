/**
 * The dispatcher: sends what the outbox holds. Every instance with a runner
 * runs one; each pass claims due deliveries by compare-and-set under a lease
 * (sql/notifications/deliveries.ts), so N instances send each (event,
 * channel) once between them, and a delivery whose sender died is taken up
 * again when its lease runs out (with the same `webhook-id`, so a receiver
 * that saw it already can tell). A failed attempt is retried with backoff
 * (about 1 s, doubling with jitter, at most 5 minutes apart) until 24 hours
 * after the event, then it is FAILED.
 *
 * A backlog (2,000 cues opening at once) is drained by a few claims in flight
 * at once (`lanes`), each of `batch` deliveries sent together and marked in
 * one statement: bounded concurrency, and a claim's lease still covers one
 * attempt's timeout. Idle, a pass is one read of the due index that finds
 * nothing, one an interval.
 */
import { randomBytes } from 'node:crypto'
import type { Db } from '../../sql/db.ts'
import type { ChannelRow } from '../../sql/notifications/channels.ts'
import * as channels from '../../sql/notifications/channels.ts'
import type { DeliveryRow } from '../../sql/notifications/deliveries.ts'
import * as deliveries from '../../sql/notifications/deliveries.ts'
import type { Logger } from '../log.ts'
import { retryDelayMs } from '../runner/backoff.ts'
import { DeliveryError, type Outgoing, type SenderSettings, sendSlack, sendWebhook } from './senders.ts'

/** Retries of one delivery: about 1 s after the first failure, doubling, at most this far apart. */
export const MAX_RETRY_DELAY_MS = 5 * 60_000

/** Milliseconds before the next attempt after failed attempt `attempt` (1-based). */
export function deliveryRetryDelayMs(attempt: number, random: () => number = Math.random): number {
  // Equal jitter from a 1.5 s base: the first retry comes 0.75–1.5 s later ("about a second").
  return retryDelayMs(attempt, 1500, { capMs: MAX_RETRY_DELAY_MS, jitter: 'equal', random })
}

export interface DispatcherOptions {
  db: Db
  /** This instance's name in claims. */
  owner: string
  settings: SenderSettings
  /** PUBLIC_URL without a trailing slash, or null. */
  publicUrl: string | null
  /** Sends an EMAIL delivery; null when SMTP_URL is not set. */
  sendEmail: ((out: Outgoing) => Promise<void>) | null
  /** An answer link for a cue delivery (PUBLIC_URL set), or null. */
  answerLink?: (delivery: DeliveryRow, channel: ChannelRow) => Promise<string | null>
  /** Milliseconds between looks for due deliveries. @default 500 */
  intervalMs?: number
  /** How long a claim lasts; longer than an attempt may take. @default 30000 */
  leaseMs?: number
  /** Deliveries per claim, all sent at once. @default 25 */
  batch?: number
  /**
   * Claims in flight at once while there is a backlog (each sent whole, so a
   * claim's lease still covers one attempt's timeout): at most `batch` ×
   * `lanes` sends in flight. Idle, one look an interval. @default 4
   */
  lanes?: number
  logger?: Pick<Logger, 'warn' | 'info'>
  /** Called after each pass (tests, the late-start sweep). */
  afterPass?: () => Promise<void>
}

export class Dispatcher {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private again = false
  private stopped = true

  constructor(private readonly opts: DispatcherOptions) {}

  start(): void {
    if (!this.stopped) return
    this.stopped = false
    this.schedule(0)
  }

  /** Something was written to the outbox here: look now, not at the next interval. */
  nudge(): void {
    if (this.stopped) return
    if (this.running) {
      this.again = true
      return
    }
    this.schedule(0)
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    await this.running
  }

  private schedule(ms: number): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = null
      this.running = this.loop().finally(() => {
        this.running = null
        if (!this.stopped) this.schedule(this.again ? 0 : (this.opts.intervalMs ?? 500))
        this.again = false
      })
    }, ms)
    this.timer.unref?.()
  }

  private async loop(): Promise<void> {
    try {
      // One look while idle; with work found, `lanes` claims in flight until
      // the backlog is gone: a claim waits on its round trips and its sends,
      // which the others fill.
      if ((await this.pass()) > 0) {
        const lanes = Array.from({ length: Math.max(1, this.opts.lanes ?? 4) }, () => this.drain())
        const failed = (await Promise.allSettled(lanes)).find((r) => r.status === 'rejected')
        if (failed) throw failed.reason
      }
      await this.opts.afterPass?.()
    } catch (err) {
      this.opts.logger?.warn({ err }, 'notification dispatch failed; retrying at the next interval')
    }
  }

  /**
   * Claim and send until a pass finds nothing due. Not "until a claim comes
   * back short": beside other instances (and other lanes) a claim often does
   * (their claims hold rows of the range), and stopping then left a burst
   * waiting a whole interval per short claim.
   */
  private async drain(): Promise<void> {
    while (!this.stopped && (await this.pass(false)) > 0) {}
  }

  /**
   * One claim and its sends; answers how many deliveries were claimed. With
   * `probe` (idle), a read of the due index first, so that an idle look
   * writes nothing; a lane draining a backlog claims at once.
   */
  async pass(probe = true): Promise<number> {
    const { db } = this.opts
    if (probe && !(await deliveries.anyDue(db))) return 0
    const token = randomBytes(16).toString('hex')
    const claimed = await deliveries.claimDue(
      db,
      this.opts.owner,
      token,
      this.opts.leaseMs ?? 30_000,
      this.opts.batch ?? 25,
    )
    if (claimed.length === 0) return 0
    const byId = new Map(
      (await channels.getByIds(db, [...new Set(claimed.map((d) => d.channelId))])).map((c) => [c.id, c]),
    )
    const sent = await Promise.all(claimed.map((d) => this.deliver(d, byId.get(d.channelId) ?? null, token)))
    // The claim's successes in one commit, not one each: under a burst the
    // commits, not the sends, were what a pass waited for. A crash before it
    // leaves them claimed; the lease runs out and they are sent again with
    // the same webhook-id, as a crash between a send and its mark always did.
    await deliveries.markDeliveredMany(
      db,
      claimed.filter((_, i) => sent[i]).map((d) => d.id),
      token,
    )
    return claimed.length
  }

  /** One attempt; answers true when it got through (marked DELIVERED by the caller), false when it was recorded as failed. */
  private async deliver(d: DeliveryRow, channel: ChannelRow | null, token: string): Promise<boolean> {
    const { db } = this.opts
    try {
      if (!channel) throw new DeliveryError('the channel was deleted', false)
      if (!channel.enabled) throw new DeliveryError('the channel is disabled', false)
      await this.send(d, channel)
      return true
    } catch (err) {
      const final = err instanceof DeliveryError && !err.retryable
      const message = err instanceof Error ? err.message : String(err)
      const status = await deliveries.markFailed(
        db,
        d.id,
        token,
        message,
        deliveryRetryDelayMs(d.attempts + 1),
        final,
      )
      if (status === 'FAILED')
        this.opts.logger?.warn(
          { deliveryId: d.id, eventId: d.eventId, channel: channel?.name, error: message },
          'notification delivery FAILED; redeliver it once the receiver is fixed',
        )
      return false
    }
  }

  /** The whole body of a delivery: the stored event and its links. */
  async bodyOf(d: DeliveryRow, channel: ChannelRow): Promise<Record<string, unknown>> {
    const base = this.opts.publicUrl
    const runId = d.runId
    const consoleLink = base && runId !== null ? `${base}/#/runs/${runId}` : base ? `${base}/` : null
    const answer = d.stepId !== null && this.opts.answerLink ? await this.opts.answerLink(d, channel) : null
    const { event: _event, ...rest } = d.payload
    return { ...rest, id: d.eventId, links: { console: consoleLink, answer } }
  }

  private async send(d: DeliveryRow, channel: ChannelRow): Promise<void> {
    const out: Outgoing = { eventId: d.eventId, body: await this.bodyOf(d, channel), channel }
    switch (channel.kind) {
      case 'WEBHOOK':
        return sendWebhook(out, this.opts.settings, new Date())
      case 'SLACK':
        return sendSlack({ ...out, body: { ...out.body, event: d.event } }, this.opts.settings)
      case 'EMAIL':
        if (!this.opts.sendEmail) throw new DeliveryError('SMTP_URL is not set on this instance', false)
        return this.opts.sendEmail({ ...out, body: { ...out.body, event: d.event } })
    }
  }
}
