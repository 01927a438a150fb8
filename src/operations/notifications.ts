/**
 * Notification channels and their delivery log (admin): checked before
 * anything is written, so a channel that could never deliver is refused at
 * create with BAD_USER_INPUT and a message naming what to fix.
 */
import * as audit from '../../sql/auditLog.ts'
import { DB_ERRNO, type Db, isDbErrno } from '../../sql/db.ts'
import type { ChannelFields, ChannelKind, ChannelRow } from '../../sql/notifications/channels.ts'
import * as channels from '../../sql/notifications/channels.ts'
import type { DeliveryRow, DeliveryStatus } from '../../sql/notifications/deliveries.ts'
import * as deliveries from '../../sql/notifications/deliveries.ts'
import * as events from '../../sql/notifications/events.ts'
import { badInput, conflict, notFound } from '../errors.ts'
import { body, NOTIFICATION_EVENTS } from '../notify/payload.ts'
import { SECRET_NAME } from '../runner/secrets.ts'
import { allowListRefusal } from '../runner/steps/allowList.ts'

export interface NotificationDeps {
  db: Db
  webhookAllow: readonly string[]
  /** Wake the local dispatcher (a test or a redeliver is due now). */
  nudge?: () => void
}

export interface ChannelInput {
  name: string
  kind: ChannelKind
  target: string
  events: string[]
  definitionIds?: readonly string[] | null
  teams?: readonly string[] | null
  lateStartSeconds?: number | null
  signingSecret?: string | null
  enabled?: boolean | null
}

const EMAIL = /^[^\s@<>(),;:"]+@[^\s@<>(),;:"]+\.[^\s@<>(),;:"]+$/
const SECRET_REFERENCE = /^\{\{\s*secret\.([^{}]*?)\s*\}\}$/

/** The fields to store, or BAD_USER_INPUT naming every problem. */
export function checkChannel(input: ChannelInput, webhookAllow: readonly string[]): ChannelFields {
  const problems: string[] = []
  const name = input.name.trim()
  if (name === '' || name.length > 191) problems.push('name must be 1 to 191 characters')
  const target = input.target.trim()
  if (input.kind === 'EMAIL') {
    const addresses = target.split(',').map((a) => a.trim())
    if (target === '' || target.length > 2000 || !addresses.every((a) => EMAIL.test(a)))
      problems.push(
        `target must be an email address (or several, comma-separated) for EMAIL; got ${JSON.stringify(target.slice(0, 80))}`,
      )
  } else {
    const refusal =
      target.length > 2000 ? 'is longer than 2000 characters' : allowListRefusal(target, webhookAllow)
    if (refusal) problems.push(`target ${refusal} (a ${input.kind} target must be allowed by WEBHOOK_ALLOW)`)
  }
  const eventNames = [...new Set(input.events)]
  if (eventNames.length === 0) problems.push('events must name at least one event, e.g. [CUE_WAITING]')
  for (const e of eventNames)
    if (!(NOTIFICATION_EVENTS as readonly string[]).includes(e)) problems.push(`events: unknown event ${e}`)
  const definitionIds: number[] = []
  for (const id of input.definitionIds ?? []) {
    if (!/^\d{1,18}$/.test(id)) problems.push(`definitionIds: ${JSON.stringify(id)} is not a definition id`)
    else definitionIds.push(Number(id))
  }
  const teams = [...new Set((input.teams ?? []).map((t) => t.trim()))]
  for (const t of teams)
    if (t === '' || t.length > 191) problems.push('teams: each team must be 1 to 191 characters')
  const lateStartSeconds = input.lateStartSeconds ?? 60
  if (!Number.isInteger(lateStartSeconds) || lateStartSeconds < 0 || lateStartSeconds > 7 * 86_400)
    problems.push('lateStartSeconds must be a whole number from 0 to 604800 (7 days)')
  let signingSecret: string | null = null
  if (
    input.signingSecret !== null &&
    input.signingSecret !== undefined &&
    input.signingSecret.trim() !== ''
  ) {
    const m = SECRET_REFERENCE.exec(input.signingSecret.trim())
    if (!m || !SECRET_NAME.test(m[1] as string))
      problems.push(
        'signingSecret must be a reference like {{secret.HOOK_KEY}} (the value is read from SHOWRUNNER_SECRET_HOOK_KEY), never the secret itself',
      )
    else signingSecret = `{{secret.${m[1]}}}`
    if (input.kind !== 'WEBHOOK') problems.push('signingSecret applies to WEBHOOK channels only')
  }
  if (problems.length > 0)
    throw badInput(`Invalid notification channel: ${problems.join('; ')}.`, { problems })
  return {
    name,
    kind: input.kind,
    target,
    events: eventNames,
    definitionIds: definitionIds.length > 0 ? definitionIds : null,
    teams: teams.length > 0 ? teams : null,
    lateStartSeconds,
    signingSecret,
    enabled: input.enabled ?? true,
  }
}

async function record(
  deps: NotificationDeps,
  actor: string,
  action: string,
  id: string | null,
  detail: unknown,
) {
  await audit.record(deps.db, {
    actor,
    action,
    targetType: 'notificationChannel',
    targetId: id,
    outcome: 'ok',
    detail,
  })
}

const duplicate = (name: string) =>
  conflict(`A notification channel named "${name}" already exists; pick another name.`)

export async function createChannel(
  deps: NotificationDeps,
  input: ChannelInput,
  actor: string,
): Promise<ChannelRow> {
  const fields = checkChannel(input, deps.webhookAllow)
  let id: number
  try {
    id = await channels.create(deps.db, fields)
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.DUP_ENTRY)) throw duplicate(fields.name)
    throw err
  }
  await record(deps, actor, 'notificationChannel.create', String(id), {
    name: fields.name,
    kind: fields.kind,
  })
  return (await channels.getById(deps.db, id)) as ChannelRow
}

export async function updateChannel(
  deps: NotificationDeps,
  id: number,
  input: ChannelInput,
  actor: string,
): Promise<ChannelRow> {
  if (!(await channels.getById(deps.db, id))) throw notFound('notification channel', id)
  const fields = checkChannel(input, deps.webhookAllow)
  try {
    await channels.update(deps.db, id, fields)
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.DUP_ENTRY)) throw duplicate(fields.name)
    throw err
  }
  await record(deps, actor, 'notificationChannel.update', String(id), {
    name: fields.name,
    kind: fields.kind,
  })
  return (await channels.getById(deps.db, id)) as ChannelRow
}

export async function deleteChannel(deps: NotificationDeps, id: number, actor: string): Promise<boolean> {
  const gone = await channels.remove(deps.db, id)
  if (!gone) throw notFound('notification channel', id)
  await record(deps, actor, 'notificationChannel.delete', String(id), null)
  return true
}

/** A TEST event for one channel, due now. */
export async function testChannel(deps: NotificationDeps, id: number, actor: string): Promise<DeliveryRow> {
  const channel = await channels.getById(deps.db, id)
  if (!channel) throw notFound('notification channel', id)
  const now = new Date()
  const deliveryId = await deps.db.transaction(async (tx) =>
    events.emitFor(tx, id, {
      type: 'TEST',
      runId: null,
      stepId: null,
      dedupeKey: `test:${id}:${events.newEventId()}`,
      payload: { ...body('TEST', now, {}), message: `A test from ${actor} for channel "${channel.name}".` },
      occurredAt: now,
      definitionId: null,
      cueTeams: null,
      rehearsal: false,
    }),
  )
  await record(deps, actor, 'notificationChannel.test', String(id), { deliveryId })
  deps.nudge?.()
  return (await deliveries.getById(deps.db, deliveryId as number)) as DeliveryRow
}

export async function redeliver(deps: NotificationDeps, id: number, actor: string): Promise<DeliveryRow> {
  const before = await deliveries.getById(deps.db, id)
  if (!before) throw notFound('notification delivery', id)
  if (before.rehearsal) throw conflict('A rehearsal delivery is never sent; there is nothing to redeliver.')
  await deliveries.redeliver(deps.db, id)
  await audit.record(deps.db, {
    actor,
    action: 'notificationDelivery.redeliver',
    targetType: 'notificationDelivery',
    targetId: String(id),
    outcome: 'ok',
    detail: { eventId: before.eventId, channelId: before.channelId, was: before.status },
  })
  deps.nudge?.()
  return (await deliveries.getById(deps.db, id)) as DeliveryRow
}

export interface DeliveryPageArgs {
  channelId: number | null
  runId: number | null
  status: DeliveryStatus | null
  first: number
  after: string | null
}

/** Newest first; `after` is the previous page's endCursor. */
export async function deliveryPage(
  deps: NotificationDeps,
  a: DeliveryPageArgs,
): Promise<{ nodes: DeliveryRow[]; pageInfo: { endCursor: string | null; hasNextPage: boolean } }> {
  let beforeId: number | null = null
  if (a.after !== null) {
    const decoded = Buffer.from(a.after, 'base64url').toString('utf8')
    const m = /^delivery:(\d{1,18})$/.exec(decoded)
    if (!m) throw badInput('after must be an endCursor from a previous notificationDeliveries page.')
    beforeId = Number(m[1])
  }
  const first = Math.min(Math.max(1, Math.trunc(a.first)), 500)
  const rows = await deliveries.page(deps.db, { ...a, beforeId, limit: first })
  const nodes = rows.slice(0, first)
  const last = nodes.at(-1)
  return {
    nodes,
    pageInfo: {
      endCursor: last ? Buffer.from(`delivery:${last.id}`).toString('base64url') : null,
      hasNextPage: rows.length > first,
    },
  }
}
