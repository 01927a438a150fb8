/**
 * Answer links: a capability URL for one cue, put in the cue notifications a
 * channel gets when PUBLIC_URL is set. The token is random (256 bits) and
 * only its SHA-256 is stored. A link is good for one answer, and every link
 * of a cue is dead once the cue closes (answered, skipped or timed out).
 * Each attempt of a delivery carries a fresh link; all of them are the same
 * capability (answer this cue once) and die together.
 */
import { createHash, randomBytes } from 'node:crypto'
import * as ladders from '../../sql/cueLadders.ts'
import type { Db } from '../../sql/db.ts'
import type { ChannelRow } from '../../sql/notifications/channels.ts'
import * as links from '../../sql/notifications/cueLinks.ts'
import type { DeliveryRow } from '../../sql/notifications/deliveries.ts'

/** The path answer links live under. */
export const ANSWER_PATH = '/answer/'

/** A token as links carry it: 32 random bytes, base64url. */
export const TOKEN_PATTERN = /^[A-Za-z0-9_-]{43}$/

export function digestOf(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex')
}

/** Events whose cue is still open when they are sent: the ones an answer link makes sense in. */
const OPEN_CUE_EVENTS = new Set(['CUE_WAITING', 'CUE_REMINDER', 'CUE_ESCALATED'])

/** A new link for the delivery's cue, or null when the cue is closed or the event is not about an open cue. */
export async function issueAnswerLink(
  db: Db,
  publicUrl: string,
  delivery: DeliveryRow,
  channel: ChannelRow,
): Promise<string | null> {
  if (delivery.stepId === null || !OPEN_CUE_EVENTS.has(delivery.event)) return null
  const ladder = await ladders.get(db, delivery.stepId)
  if (!ladder || ladder.answer) return null
  const token = randomBytes(32).toString('base64url')
  await links.create(db, digestOf(token), delivery.stepId, channel.name)
  return `${publicUrl}${ANSWER_PATH}${token}`
}
