/** Operating many shows: bulk actions, and what a run says about retries, bulk actions and speed. */
import DataLoader from 'dataloader'
import * as bulkSql from '../sql/bulkActions.ts'
import type { ApiContext } from '../src/api/context.ts'
import type { BulkResult } from '../src/operations/bulk.ts'
import { builder } from './builder.ts'
import { EventRunRef } from './refs.ts'

export const BulkActionEnum = builder.enumType('BulkAction', {
  description: 'PAUSE: running runs; RESUME: paused runs; CANCEL: every run not yet ended.',
  values: { PAUSE: { value: 'pause' }, RESUME: { value: 'resume' }, CANCEL: { value: 'cancel' } } as const,
})

export const BulkResultRef = builder.objectRef<BulkResult>('BulkResult')

BulkResultRef.implement({
  description:
    'matched: runs the filter selects that the action applies to now; applied: runs this call changed (0 for a dry run, at most 10,000 per call); bulkId: null for a dry run.',
  fields: (t) => ({
    bulkId: t.exposeID('bulkId', { nullable: true }),
    matched: t.exposeInt('matched'),
    applied: t.exposeInt('applied'),
    dryRun: t.exposeBoolean('dryRun'),
  }),
})

/** Per request: the bulk actions of every run a response names, in one statement. */
const bulkIdLoaders = new WeakMap<object, DataLoader<number, number[]>>()

function bulkIdsOf(ctx: ApiContext, runId: number): Promise<number[]> {
  let loader = bulkIdLoaders.get(ctx)
  if (!loader) {
    loader = new DataLoader<number, number[]>(
      async (ids) => {
        const byRun = await bulkSql.ofRuns(ctx.services.db, ids)
        return ids.map((id) => byRun.get(id) ?? [])
      },
      { maxBatchSize: 1000 },
    )
    bulkIdLoaders.set(ctx, loader)
  }
  return loader.load(runId)
}

builder.objectFields(EventRunRef, (t) => ({
  speed: t.exposeFloat('speed', {
    description: 'A rehearsal’s speed: its waits and deadlines run 1/speed as long. 1 for every other run.',
  }),
  retryOf: t.field({
    type: EventRunRef,
    nullable: true,
    description: 'The FAILED run this one retries.',
    resolve: (run, _args, ctx) => (run.retryOf === null ? null : ctx.loaders.run.load(run.retryOf)),
  }),
  bulkIds: t.field({
    type: ['ID'],
    description: 'The bulk actions (bulkRuns) that changed this run, oldest first.',
    resolve: async (run, _args, ctx) => (await bulkIdsOf(ctx, run.id)).map(String),
  }),
}))
