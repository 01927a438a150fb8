/** `RunFilter`, `PageInfo` and `RunPage`: the paged, filtered run list for user interfaces. */
import type { RunListRow } from '../sql/eventRuns/index.ts'
import { selectsField } from '../src/api/selection.ts'
import { builder } from './builder.ts'
import { RunStatusEnum } from './enums.ts'
import { EventRunRef } from './refs.ts'

export interface PageInfoShape {
  endCursor: string | null
  hasNextPage: boolean
}

export interface RunPageShape {
  nodes: RunListRow[]
  pageInfo: PageInfoShape
}

export const RunFilterInput = builder.inputType('RunFilter', {
  description:
    'Runs matching every field given; an omitted or null field is no condition. Used by runPage and runChanges.',
  fields: (t) => ({
    definitionId: t.id(),
    statuses: t.field({
      type: [RunStatusEnum],
      description: 'Any of these statuses; an empty list matches no run.',
    }),
    scope: t.string({ description: 'Exactly this scope ("" is the default scope).' }),
    scheduledAfter: t.field({
      type: 'DateTime',
      description: 'scheduledFor at or after this instant (inclusive).',
    }),
    scheduledBefore: t.field({
      type: 'DateTime',
      description: 'scheduledFor before this instant (exclusive), so two filters can tile time.',
    }),
    rehearsal: t.boolean({ description: 'true: rehearsals only; false: real runs only.' }),
  }),
})

export const PageInfoRef = builder.objectRef<PageInfoShape>('PageInfo').implement({
  description: 'Where a page ends and whether another follows.',
  fields: (t) => ({
    endCursor: t.exposeString('endCursor', {
      nullable: true,
      description:
        'Opaque; pass it as `after` for the next page. null when the page is empty. Names a position, not an offset: stays valid while runs are added or removed.',
    }),
    hasNextPage: t.exposeBoolean('hasNextPage'),
  }),
})

export const RunPageRef = builder.objectRef<RunPageShape>('RunPage').implement({
  description: 'One page of runs, newest first by (scheduledFor, id).',
  fields: (t) => ({
    nodes: t.field({
      type: [EventRunRef],
      resolve: async (page, _args, ctx, info) => {
        // Each run's definition and version then answer without a query per run.
        // A failed read is not reported here: the field asks its loader again.
        await ctx.loaders.preloadParents(page.nodes, {
          definitions: selectsField(info, 'definition'),
          versions: selectsField(info, 'version'),
        })
        return page.nodes
      },
    }),
    pageInfo: t.field({ type: PageInfoRef, resolve: (page) => page.pageInfo }),
  }),
})
