/** Notification channels and their delivery log: every field here is admin only. */
import { builder } from '../schema/builder.ts'
import {
  DeliveryPageRef,
  DeliveryStatusEnum,
  NotificationChannelInput,
  NotificationChannelRef,
  NotificationDeliveryRef,
} from '../schema/notifications.ts'
import * as channels from '../sql/notifications/channels.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import {
  type ChannelInput,
  createChannel,
  deleteChannel,
  deliveryPage,
  type NotificationDeps,
  redeliver,
  testChannel,
  updateChannel,
} from '../src/operations/notifications.ts'
import { actorOf } from './deps.ts'

function deps(ctx: ApiContext): NotificationDeps {
  const n = ctx.services.notifications
  return { db: ctx.services.db, webhookAllow: n.webhookAllow, nudge: () => n.nudge() }
}

builder.queryFields((t) => ({
  notificationChannels: t.field({
    type: [NotificationChannelRef],
    extensions: requires('admin'),
    resolve: (_root, _args, ctx) => channels.list(ctx.services.db),
  }),
  notificationDeliveries: t.field({
    type: DeliveryPageRef,
    description: 'The delivery log, newest first; first is clamped to 1..500.',
    extensions: requires('admin'),
    args: {
      channelId: t.arg.id(),
      runId: t.arg.id(),
      status: t.arg({ type: DeliveryStatusEnum }),
      first: t.arg.int({ defaultValue: 50 }),
      after: t.arg.string(),
    },
    resolve: (_root, a, ctx) =>
      deliveryPage(deps(ctx), {
        channelId: a.channelId ? parseId(a.channelId, 'channelId') : null,
        runId: a.runId ? parseId(a.runId, 'runId') : null,
        status: a.status ?? null,
        first: a.first ?? 50,
        after: a.after ?? null,
      }),
  }),
}))

builder.mutationFields((t) => ({
  createNotificationChannel: t.field({
    type: NotificationChannelRef,
    extensions: requires('admin'),
    args: { input: t.arg({ type: NotificationChannelInput, required: true }) },
    resolve: (_root, a, ctx) => createChannel(deps(ctx), a.input as ChannelInput, actorOf(ctx)),
  }),
  updateNotificationChannel: t.field({
    type: NotificationChannelRef,
    extensions: requires('admin'),
    args: {
      id: t.arg.id({ required: true }),
      input: t.arg({ type: NotificationChannelInput, required: true }),
    },
    resolve: (_root, a, ctx) =>
      updateChannel(deps(ctx), parseId(a.id, 'id'), a.input as ChannelInput, actorOf(ctx)),
  }),
  deleteNotificationChannel: t.field({
    type: 'Boolean',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, a, ctx) => deleteChannel(deps(ctx), parseId(a.id, 'id'), actorOf(ctx)),
  }),
  testNotificationChannel: t.field({
    type: NotificationDeliveryRef,
    description: 'Send a TEST event to the channel now; answers its delivery.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, a, ctx) => testChannel(deps(ctx), parseId(a.id, 'id'), actorOf(ctx)),
  }),
  redeliver: t.field({
    type: NotificationDeliveryRef,
    description: 'Send a delivery again now (same webhook-id), retried for another 24 h.',
    extensions: requires('admin'),
    args: { deliveryId: t.arg.id({ required: true }) },
    resolve: (_root, a, ctx) => redeliver(deps(ctx), parseId(a.deliveryId, 'deliveryId'), actorOf(ctx)),
  }),
}))
