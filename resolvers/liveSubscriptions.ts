/**
 * `runChanges` and `waitingSteps`: what a live console watches. Each is fed by
 * one poller per process (src/api/runChangeFeed.ts, src/api/inboxFeed.ts), so
 * subscribers add no database load of their own.
 */

import { builder } from '../schema/builder.ts'
import { EventRunRef, RunStepRef } from '../schema/refs.ts'
import { RunFilterInput } from '../schema/runPage.ts'
import type { RunListRow } from '../sql/eventRuns.ts'
import { withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import type { Inbox } from '../src/api/inboxFeed.ts'
import { createLoaders } from '../src/api/loaders.ts'
import { parseRunFilter } from '../src/api/runFilter.ts'

/**
 * A subscription's context lives as long as the subscription, and so would its
 * DataLoaders' caches: each event gets fresh loaders, so `steps`, `logs` and
 * the like answer as of the event, not as of the first one.
 */
function freshLoaders(ctx: ApiContext, runs: readonly RunListRow[]): void {
  ctx.loaders = createLoaders(ctx.services.db)
  ctx.loaders.rememberRuns(runs)
}

builder.subscriptionFields((t) => ({
  runChanges: t.field({
    type: EventRunRef,
    description:
      'Every later change of status, phase, health or waiting-cue count of a run matching filter (and each new matching run), the whole run each time; nothing is sent at once. A run whose status moves out of filter.statuses is sent once more, so a list can drop it. Changes made through this server arrive at once, others within the poll interval (STATUS_POLL_MS).',
    extensions: requires('viewer'),
    args: { filter: t.arg({ type: RunFilterInput }) },
    subscribe: (_root, args, ctx) => ctx.services.runChanges.watch(parseRunFilter(args.filter)),
    resolve: (run: RunListRow, _args, ctx) => {
      freshLoaders(ctx, [run])
      return run
    },
  }),
  waitingSteps: t.field({
    type: [RunStepRef],
    description:
      'The cue inbox (steps parked on a person, oldest first) at once, then the whole inbox again whenever it changes. limit is clamped to 1..500.',
    extensions: requires('viewer'),
    args: { limit: t.arg.int({ defaultValue: 100 }) },
    subscribe: (_root, args, ctx) => ctx.services.inbox.watch(withDefault(args.limit, 100)),
    resolve: (inbox: Inbox, _args, ctx) => {
      freshLoaders(ctx, inbox.runs)
      return inbox.steps
    },
  }),
}))
