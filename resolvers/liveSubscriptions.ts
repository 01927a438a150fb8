/**
 * `runChanges`, `waitingSteps` and `waitingStepChanges`: what a live console watches. Each is fed by
 * one poller per process (src/api/runChangeFeed.ts, src/api/inboxFeed.ts), so
 * subscribers add no database load of their own.
 */

import { builder } from '../schema/builder.ts'
import { EventRunRef, RunStepRef, WaitingStepsChangeRef } from '../schema/refs.ts'
import { RunFilterInput } from '../schema/runPage.ts'
import { withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import { type InboxChange, inboxChanges } from '../src/api/inboxChanges.ts'
import type { Inbox } from '../src/api/inboxFeed.ts'
import type { Loaders } from '../src/api/loaders.ts'
import { identitiesOf } from '../src/api/person.ts'
import type { RunChange } from '../src/api/runChangeFeed.ts'
import { parseRunFilter } from '../src/api/runFilter.ts'
import { callerOf, MINE_DESCRIPTION } from './steps.ts'

/**
 * A subscription's context lives as long as the subscription, and so would its
 * DataLoaders' caches. Each event brings its own instead: made fresh per poll
 * (so `steps`, `logs` and the like answer as of the event, not the first one)
 * and shared by every subscriber of that poll (so nested fields cost one
 * statement per poll, not one per subscriber).
 */
function useEventLoaders(ctx: ApiContext, loaders: Loaders): void {
  ctx.loaders = loaders
}

builder.subscriptionFields((t) => ({
  runChanges: t.field({
    type: EventRunRef,
    description:
      'Every later change of status, phase, health or waiting-cue count of a run matching filter (and each new matching run), the whole run each time; nothing is sent at once. A run whose status moves out of filter.statuses is sent once more, so a list can drop it. Changes made through this server arrive at once, others within the poll interval (STATUS_POLL_MS).',
    extensions: requires('viewer'),
    args: { filter: t.arg({ type: RunFilterInput }) },
    subscribe: (_root, args, ctx) => ctx.services.runChanges.watch(parseRunFilter(args.filter)),
    resolve: (change: RunChange, _args, ctx) => {
      useEventLoaders(ctx, change.loaders)
      return change.run
    },
  }),
  waitingSteps: t.field({
    type: [RunStepRef],
    description: `The cue inbox (steps parked on a person, oldest first) at once, then the whole inbox again whenever it changes. limit is clamped to 1..500. ${MINE_DESCRIPTION}`,
    extensions: requires('viewer'),
    args: { limit: t.arg.int({ defaultValue: 100 }), mine: t.arg.boolean({ defaultValue: false }) },
    subscribe: (_root, args, ctx) =>
      ctx.services.inbox.watch(withDefault(args.limit, 100), args.mine ? identitiesOf(callerOf(ctx)) : null),
    resolve: (inbox: Inbox, _args, ctx) => {
      useEventLoaders(ctx, inbox.loaders)
      return inbox.steps
    },
  }),
  waitingStepChanges: t.field({
    type: WaitingStepsChangeRef,
    description: `The cue inbox (steps parked on a person, oldest first) as changes: the whole inbox at once (reset: true), then what changed each time it changes, instead of the whole inbox again. limit is clamped to 1..500. ${MINE_DESCRIPTION}`,
    extensions: requires('viewer'),
    args: { limit: t.arg.int({ defaultValue: 100 }), mine: t.arg.boolean({ defaultValue: false }) },
    subscribe: async (_root, args, ctx) =>
      inboxChanges(
        await ctx.services.inbox.watch(
          withDefault(args.limit, 100),
          args.mine ? identitiesOf(callerOf(ctx)) : null,
        ),
      ),
    resolve: (change: InboxChange, _args, ctx) => {
      useEventLoaders(ctx, change.loaders)
      return change
    },
  }),
}))
