/** Operating many shows (operator): bulk actions over a RunFilter, and retrying a failed run. */
import { builder } from '../schema/builder.ts'
import { BulkActionEnum, BulkResultRef } from '../schema/bulk.ts'
import { EventRunRef } from '../schema/refs.ts'
import { RunFilterInput } from '../schema/runPage.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { parseRunFilter } from '../src/api/runFilter.ts'
import { bulkRuns, MAX_BULK_RUNS } from '../src/operations/bulk.ts'
import { retryRun } from '../src/operations/retry.ts'
import { actorOf } from './deps.ts'

builder.mutationFields((t) => ({
  bulkRuns: t.field({
    type: BulkResultRef,
    description: `Pause, resume or cancel the runs a filter selects. A dry run unless dryRun is false; an empty filter is refused; at most ${MAX_BULK_RUNS.toLocaleString('en')} runs per call, in short batches; audited with its bulkId, which each changed run's log names.`,
    extensions: requires('operator'),
    args: {
      action: t.arg({ type: BulkActionEnum, required: true }),
      filter: t.arg({ type: RunFilterInput, required: true }),
      dryRun: t.arg.boolean({ defaultValue: true }),
      reason: t.arg.string(),
    },
    resolve: (_root, args, ctx) => {
      const s = ctx.services
      return bulkRuns(
        { db: s.db, clock: s.clock, nudge: () => s.nudge() },
        {
          action: args.action,
          filter: parseRunFilter(args.filter),
          dryRun: args.dryRun,
          reason: args.reason ?? null,
          actor: actorOf(ctx),
        },
      )
    },
  }),
  retryRun: t.field({
    type: EventRunRef,
    description:
      'Retry a FAILED run: a new run of its version, scope and params, starting now, linked by retryOf. Steps before fromStep (a step seq; default the failed step) are SKIPPED with a result naming the original, so earlier webhooks are not sent again. Retrying the same run again answers the same retry.',
    extensions: requires('operator'),
    args: { id: t.arg.id({ required: true }), fromStep: t.arg.int() },
    resolve: (_root, args, ctx) => {
      const s = ctx.services
      return retryRun(
        { db: s.db, clock: s.clock, nudge: () => s.nudge(), quota: s.runQuota },
        { id: parseId(args.id, 'id'), fromStep: args.fromStep ?? null, actor: actorOf(ctx) },
      )
    },
  }),
}))
