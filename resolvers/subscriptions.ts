/** `runStatus`: a run's live fields, now and at each change, until it finishes. */

import { builder } from '../schema/builder.ts'
import { RunStatusEventRef } from '../schema/refs.ts'
import { statusesOf } from '../sql/eventRuns/index.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { notFound } from '../src/errors.ts'

builder.subscriptionFields((t) => ({
  runStatus: t.field({
    type: RunStatusEventRef,
    description:
      'Emits the current state at once, then each change of status, health, currentPhase, waitingSteps or updatedAt; completes after a terminal status. Unknown id: NOT_FOUND.',
    extensions: requires('viewer'),
    args: { id: t.arg.id({ required: true }) },
    subscribe: async (_root, args, ctx) => {
      const id = parseId(args.id, 'id')
      // The first read is also the existence check, so an unknown id fails
      // before any stream is opened.
      const [current] = await statusesOf(ctx.services.db, [id])
      if (!current) throw notFound('run', args.id)
      return ctx.services.poller.watch(current)
    },
    resolve: (event) => event,
  }),
}))
