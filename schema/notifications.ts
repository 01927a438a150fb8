/** Notification channels and deliveries: the types of the notifications API. */

import DataLoader from 'dataloader'
import type { StepRow } from '../sql/eventSteps/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import type { ChannelRow } from '../sql/notifications/channels.ts'
import * as channels from '../sql/notifications/channels.ts'
import type { DeliveryRow } from '../sql/notifications/deliveries.ts'
import type { ApiContext } from '../src/api/context.ts'
import { NOTIFICATION_EVENTS } from '../src/notify/payload.ts'
import { builder } from './builder.ts'
import { EventRunRef, RunStepRef } from './refs.ts'
import { PageInfoRef, type PageInfoShape } from './runPage.ts'

/**
 * Per-request loaders for a delivery page's channels and steps (one statement
 * each for the whole page), kept beside the request's other loaders.
 */
const pageLoaders = new WeakMap<
  object,
  { channel: DataLoader<number, ChannelRow | null>; step: DataLoader<number, StepRow | null> }
>()
function loadersOf(ctx: ApiContext) {
  let l = pageLoaders.get(ctx.loaders)
  if (!l) {
    const db = ctx.services.db
    l = {
      channel: new DataLoader(async (ids) => {
        const rows = await channels.getByIds(db, ids)
        return ids.map((id) => rows.find((c) => c.id === id) ?? null)
      }),
      step: new DataLoader(async (ids) => {
        const rows = await steps.getByIds(db, ids)
        return ids.map((id) => rows.find((st) => st.id === id) ?? null)
      }),
    }
    pageLoaders.set(ctx.loaders, l)
  }
  return l
}

export const ChannelKindEnum = builder.enumType('ChannelKind', {
  values: ['WEBHOOK', 'SLACK', 'EMAIL'] as const,
})

export const NotificationEventEnum = builder.enumType('NotificationEvent', {
  values: NOTIFICATION_EVENTS,
})

export const DeliveryStatusEnum = builder.enumType('DeliveryStatus', {
  values: ['PENDING', 'DELIVERED', 'FAILED'] as const,
})

export const NotificationChannelRef = builder.objectRef<ChannelRow>('NotificationChannel').implement({
  description:
    'Where notifications go: a WEBHOOK (Standard Webhooks), a SLACK incoming webhook, or EMAIL addresses. The signing secret is never answered.',
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    kind: t.expose('kind', { type: ChannelKindEnum }),
    target: t.exposeString('target'),
    events: t.field({
      type: [NotificationEventEnum],
      resolve: (c) => c.events as (typeof NOTIFICATION_EVENTS)[number][],
    }),
    definitionIds: t.idList({ nullable: true, resolve: (c) => c.definitionIds?.map(String) ?? null }),
    teams: t.stringList({
      nullable: true,
      description: 'Narrows cue events to cues assigned to one of these teams (team:NAME).',
      resolve: (c) => c.teams,
    }),
    lateStartSeconds: t.exposeInt('lateStartSeconds'),
    enabled: t.exposeBoolean('enabled'),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
})

export const NotificationDeliveryRef = builder.objectRef<DeliveryRow>('NotificationDelivery').implement({
  description:
    'One event for one channel. PENDING until an attempt gets through (DELIVERED) or retries run out 24 h after the event (FAILED).',
  fields: (t) => ({
    id: t.exposeID('id'),
    eventId: t.exposeString('eventId', { description: 'The webhook-id: the same on every attempt.' }),
    event: t.field({
      type: NotificationEventEnum,
      resolve: (d) => d.event as (typeof NOTIFICATION_EVENTS)[number],
    }),
    channel: t.field({
      type: NotificationChannelRef,
      resolve: async (d, _args, ctx) => {
        const c = await loadersOf(ctx).channel.load(d.channelId)
        if (!c) throw new Error(`channel ${d.channelId} is missing`)
        return c
      },
    }),
    run: t.field({
      type: EventRunRef,
      nullable: true,
      resolve: (d, _args, ctx) => (d.runId === null ? null : ctx.loaders.run.load(d.runId)),
    }),
    step: t.field({
      type: RunStepRef,
      nullable: true,
      resolve: (d, _args, ctx) => (d.stepId === null ? null : loadersOf(ctx).step.load(d.stepId)),
    }),
    status: t.expose('status', { type: DeliveryStatusEnum }),
    rehearsal: t.exposeBoolean('rehearsal', {
      description: "A rehearsal's notification: recorded as delivered, sent nowhere.",
    }),
    attempts: t.exposeInt('attempts'),
    lastError: t.exposeString('lastError', { nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    deliveredAt: t.expose('deliveredAt', { type: 'DateTime', nullable: true }),
    nextAttemptAt: t.expose('nextAttemptAt', { type: 'DateTime', nullable: true }),
  }),
})

export const DeliveryPageRef = builder
  .objectRef<{ nodes: DeliveryRow[]; pageInfo: PageInfoShape }>('DeliveryPage')
  .implement({
    fields: (t) => ({
      nodes: t.field({ type: [NotificationDeliveryRef], resolve: (p) => p.nodes }),
      pageInfo: t.field({ type: PageInfoRef, resolve: (p) => p.pageInfo }),
    }),
  })

export const NotificationChannelInput = builder.inputType('NotificationChannelInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    kind: t.field({ type: ChannelKindEnum, required: true }),
    target: t.string({
      required: true,
      description: 'An allowed URL (WEBHOOK_ALLOW) for WEBHOOK and SLACK; email addresses for EMAIL.',
    }),
    events: t.field({ type: [NotificationEventEnum], required: true }),
    definitionIds: t.idList(),
    teams: t.stringList(),
    lateStartSeconds: t.int({ defaultValue: 60 }),
    signingSecret: t.string({ description: 'A {{secret.NAME}} reference (WEBHOOK only).' }),
    enabled: t.boolean({ defaultValue: true }),
  }),
})
