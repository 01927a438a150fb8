/** `runPage`: the run list for user interfaces, filtered and paged by an opaque cursor (viewer). */

import { builder } from '../schema/builder.ts'
import { RunFilterInput, RunPageRef } from '../schema/runPage.ts'
import { MAX_PAGE_SIZE, runPage } from '../sql/runPage.ts'
import { withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { decodeCursor, encodeCursor, parseRunFilter } from '../src/api/runFilter.ts'

export const DEFAULT_PAGE_SIZE = 50

builder.queryFields((t) => ({
  runPage: t.field({
    type: RunPageRef,
    description: `Runs matching filter, newest first by (scheduledFor, id). first is clamped to 1..${MAX_PAGE_SIZE}. after is the endCursor of the previous page (BAD_USER_INPUT when it is not one); pages after a cursor are stable while runs are added.`,
    extensions: requires('viewer'),
    args: {
      filter: t.arg({ type: RunFilterInput }),
      first: t.arg.int({ defaultValue: DEFAULT_PAGE_SIZE }),
      after: t.arg.string(),
    },
    resolve: async (_root, args, ctx) => {
      const filter = parseRunFilter(args.filter)
      const after = args.after == null ? null : decodeCursor(args.after)
      const page = await runPage(ctx.services.db, filter, withDefault(args.first, DEFAULT_PAGE_SIZE), after)
      // A step's `run` or a holder on this page is then answered without a query.
      ctx.loaders.rememberRuns(page.runs)
      const last = page.runs.at(-1)
      return {
        nodes: page.runs,
        pageInfo: {
          endCursor: last ? encodeCursor(last) : null,
          hasNextPage: page.hasNextPage,
        },
      }
    },
  }),
}))
