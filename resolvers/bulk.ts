/** Operating many shows (operator): bulk actions over a RunFilter. */
import { builder } from '../schema/builder.ts'
import { BulkActionEnum, BulkResultRef } from '../schema/bulk.ts'
import { RunFilterInput } from '../schema/runPage.ts'
import { requires } from '../src/api/authz.ts'
import { parseRunFilter } from '../src/api/runFilter.ts'
import { bulkRuns, MAX_BULK_RUNS } from '../src/operations/bulk.ts'
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
}))
