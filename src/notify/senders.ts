/**
 * Sending one delivery: the body a channel kind takes, through the same
 * allow-list and address guard as `core.webhook` steps. WEBHOOK follows
 * Standard Webhooks (headers `webhook-id`, `webhook-timestamp`,
 * `webhook-signature`, signed with the `standardwebhooks` package); SLACK
 * posts `{text, blocks}` to an incoming webhook; EMAIL is in email.ts.
 */

import { Webhook } from 'standardwebhooks'
import { request } from 'undici'
import type { ChannelRow } from '../../sql/notifications/channels.ts'
import { SecretScope, type SecretSource } from '../runner/secrets.ts'
import { allowListRefusal, shownUrl } from '../runner/steps/allowList.ts'
import { agentFor, networkReason, refusalOf } from '../runner/steps/webhook.ts'

/** How long one attempt may take. */
export const SEND_TIMEOUT_MS = 10_000

/** A failed attempt; `retryable: false` fails the delivery at once (a refused URL will not get better). */
export class DeliveryError extends Error {
  override readonly name = 'DeliveryError'
  constructor(
    message: string,
    readonly retryable = true,
  ) {
    super(message)
  }
}

/** What a sender is given: the whole body (links included), the event id and the channel. */
export interface Outgoing {
  eventId: string
  body: Record<string, unknown>
  channel: ChannelRow
}

export interface SenderSettings {
  webhookAllow: readonly string[]
  secrets: SecretSource
}

/**
 * The key a signing secret names: a Standard Webhooks secret (`whsec_` and
 * base64) as that standard reads it, any other value as its UTF-8 bytes.
 */
export function signer(secret: string): Webhook {
  if (secret.startsWith('whsec_')) return new Webhook(secret)
  return new Webhook(new Uint8Array(Buffer.from(secret, 'utf8')), { format: 'raw' })
}

/** The Standard Webhooks headers of `payload`, sent at `at`. */
export function signedHeaders(
  secret: string | null,
  eventId: string,
  at: Date,
  payload: string,
): Record<string, string> {
  const headers: Record<string, string> = {
    'webhook-id': eventId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
  }
  if (secret !== null) headers['webhook-signature'] = signer(secret).sign(eventId, at, payload)
  return headers
}

/** POST `payload` as JSON to an allowed URL, no redirects followed; throws a DeliveryError on failure. */
export async function postJson(
  url: string,
  payload: string,
  headers: Record<string, string>,
  settings: SenderSettings,
): Promise<void> {
  const refusal = allowListRefusal(url, settings.webhookAllow)
  if (refusal) throw new DeliveryError(`refused: ${refusal}`, false)
  const signal = AbortSignal.timeout(SEND_TIMEOUT_MS)
  let status: number
  try {
    // undici's request rather than fetch: no WHATWG Request, Response and
    // streams per send, which were a fifth of an instance's CPU while it
    // drained a burst of 2,000 notifications. It follows no redirects.
    const res = await request(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': 'showrunner', ...headers },
      body: payload,
      signal,
      dispatcher: agentFor(settings.webhookAllow),
    })
    status = res.statusCode
    await res.body.dump().catch(() => {})
  } catch (err) {
    const refused = refusalOf(err)
    if (refused) throw new DeliveryError(`refused: ${shownUrl(url)}: ${refused}`, false)
    if (signal.aborted) throw new DeliveryError(`POST ${shownUrl(url)} timed out after ${SEND_TIMEOUT_MS} ms`)
    throw new DeliveryError(`POST ${shownUrl(url)} failed: ${networkReason(err)}`)
  }
  if (status >= 200 && status < 300) return
  throw new DeliveryError(`POST ${shownUrl(url)} answered HTTP ${status}`)
}

/** Resolve a channel's `{{secret.NAME}}` signing secret (throws a final DeliveryError when it is not set). */
export function signingSecretOf(channel: ChannelRow, secrets: SecretSource): string | null {
  if (channel.signingSecret === null) return null
  try {
    return new SecretScope(secrets).resolve(channel.signingSecret)
  } catch (err) {
    throw new DeliveryError((err as Error).message, false)
  }
}

export async function sendWebhook(out: Outgoing, settings: SenderSettings, now: Date): Promise<void> {
  const secret = signingSecretOf(out.channel, settings.secrets)
  const payload = JSON.stringify(out.body)
  await postJson(out.channel.target, payload, signedHeaders(secret, out.eventId, now, payload), settings)
}

/** One line a person reads first: what happened, to which show. */
export function headline(body: Record<string, unknown>): string {
  const run = body.run as { id?: string; definition?: { title?: string }; scope?: string } | null
  const cue = body.cue as { prompt?: string; assignees?: string[] } | null
  const event = String(body.event ?? body.type)
  const show = run?.definition?.title
    ? `${run.definition.title}${run.scope ? ` (${run.scope})` : ''}`
    : 'showrunner'
  const what: Record<string, string> = {
    CUE_WAITING: 'A cue is waiting',
    CUE_REMINDER: 'Reminder: a cue is still waiting',
    CUE_ESCALATED: 'A cue was escalated',
    CUE_TIMED_OUT: 'A cue timed out',
    CUE_ANSWERED: 'A cue was answered',
    RUN_FAILED: 'A run failed',
    RUN_MISSED: 'A run missed its start',
    RUN_DEGRADED: 'A run is degraded',
    RUN_LATE_START: 'A run has not started yet',
    RUN_COMPLETED: 'A run completed',
    TEST: 'Test notification',
  }
  const prompt = cue?.prompt ? `: ${cue.prompt}` : ''
  const to = cue?.assignees && cue.assignees.length > 0 ? ` (for ${cue.assignees.join(', ')})` : ''
  return `${what[event] ?? event} — ${show}${prompt}${to}`
}

/** The links of a body as lines of text. */
export function linkLines(body: Record<string, unknown>): string[] {
  const links = (body.links ?? {}) as { console?: string | null; answer?: string | null }
  const lines: string[] = []
  if (links.answer) lines.push(`Answer: ${links.answer}`)
  if (links.console) lines.push(`Console: ${links.console}`)
  return lines
}

export async function sendSlack(out: Outgoing, settings: SenderSettings): Promise<void> {
  const text = headline(out.body)
  const lines = linkLines(out.body)
  const blocks: unknown[] = [{ type: 'section', text: { type: 'mrkdwn', text } }]
  if (lines.length > 0)
    blocks.push({ type: 'context', elements: lines.map((l) => ({ type: 'mrkdwn', text: l })) })
  await postJson(out.channel.target, JSON.stringify({ text, blocks }), {}, settings)
}
