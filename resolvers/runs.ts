/** Runs: the list and one run (viewer), and the run controls (operator). */

import { builder } from '../schema/builder.ts'
import { RunStatusEnum } from '../schema/enums.ts'
import { BackfillResultRef, EventRunRef, TransitionResultRef } from '../schema/refs.ts'
import { listRuns } from '../sql/runPage.ts'
import { parseId, parseOptionalId, withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { selectsField } from '../src/api/selection.ts'
import { backfillRuns } from '../src/operations/backfill.ts'
import { cancelRun, pauseRun, resumeRun, startRun } from '../src/operations/runControls.ts'
import { actorOf, controlDeps } from './deps.ts'

builder.queryFields((t) => ({
  runs: t.field({
    type: [EventRunRef],
    description: 'Newest first (scheduledFor, then id). limit is clamped to 1..500.',
    extensions: requires('viewer'),
    args: {
      definitionId: t.arg.id(),
      status: t.arg({ type: RunStatusEnum }),
      limit: t.arg.int({ defaultValue: 100 }),
    },
    resolve: async (_root, args, ctx, info) => {
      const list = await listRuns(ctx.services.db, {
        definitionId: parseOptionalId(args.definitionId, 'definitionId'),
        status: args.status ?? null,
        limit: withDefault(args.limit, 100),
      })
      // A step's `run` or a holder in this list is then answered without a query.
      ctx.loaders.rememberRuns(list)
      // Each run's definition and version then answer synchronously. A failed
      // read is not reported here: the field asks its loader again and reports it.
      await ctx.loaders.preloadParents(list, {
        definitions: selectsField(info, 'definition'),
        versions: selectsField(info, 'version'),
      })
      return list
    },
  }),
  run: t.field({
    type: EventRunRef,
    nullable: true,
    description: 'null when no run has this id.',
    extensions: requires('viewer'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => ctx.loaders.run.load(parseId(args.id, 'id')),
  }),
}))

builder.mutationFields((t) => ({
  startRun: t.field({
    type: EventRunRef,
    description:
      'Start a run now, or at `at` (idempotent on definition, scope and at: the existing run is answered). A rehearsal walks the program without side effects and takes no concurrency key.',
    extensions: requires('operator'),
    args: {
      definitionId: t.arg.id({ required: true }),
      scope: t.arg.string({ defaultValue: '' }),
      at: t.arg({ type: 'DateTime' }),
      params: t.arg({ type: 'JSON' }),
      rehearsal: t.arg.boolean({ defaultValue: false }),
      speed: t.arg.float({
        defaultValue: 1,
        description: 'Rehearsals only, 1..3600: the show’s waits and deadlines run 1/speed as long.',
      }),
    },
    resolve: (_root, args, ctx) =>
      startRun(controlDeps(ctx), {
        definitionId: parseId(args.definitionId, 'definitionId'),
        scope: args.scope ?? '',
        at: args.at ?? null,
        params: args.params ?? null,
        rehearsal: args.rehearsal ?? false,
        speed: args.speed ?? 1,
        actor: actorOf(ctx),
      }),
  }),
  pauseRun: t.field({
    type: TransitionResultRef,
    description: 'RUNNING or ENDING → PAUSED; the runner takes no further step until resumed.',
    extensions: requires('operator'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => pauseRun(controlDeps(ctx), parseId(args.id, 'id'), actorOf(ctx)),
  }),
  resumeRun: t.field({
    type: TransitionResultRef,
    description: 'PAUSED → RUNNING, continuing at once.',
    extensions: requires('operator'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => resumeRun(controlDeps(ctx), parseId(args.id, 'id'), actorOf(ctx)),
  }),
  cancelRun: t.field({
    type: TransitionResultRef,
    description:
      'Any unfinished status → CANCELLED; unfinished steps are cancelled and the concurrency key is released.',
    extensions: requires('operator'),
    args: { id: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: (_root, args, ctx) =>
      cancelRun(controlDeps(ctx), parseId(args.id, 'id'), actorOf(ctx), args.reason ?? null),
  }),
}))

builder.mutationFields((t) => ({
  backfillRuns: t.field({
    type: BackfillResultRef,
    description:
      'Make the runs of every occurrence in [from, to) for the given scopes (default: the definition’s): the same instants nextOccurrences gives. Idempotent on the occurrence; at most 1000 occurrences (instants × scopes) per call. Backfilled runs start as soon as they are due, never MISSED for lateness, under the overlap policy and concurrency key.',
    extensions: requires('operator'),
    args: {
      definitionId: t.arg.id({ required: true }),
      from: t.arg({ type: 'DateTime', required: true }),
      to: t.arg({ type: 'DateTime', required: true }),
      scopes: t.arg.stringList(),
    },
    resolve: (_root, args, ctx) =>
      backfillRuns(
        { db: ctx.services.db, nudge: () => ctx.services.nudge(), quota: ctx.services.runQuota },
        {
          definitionId: parseId(args.definitionId, 'definitionId'),
          from: args.from,
          to: args.to,
          scopes: args.scopes ?? null,
          actor: actorOf(ctx),
        },
      ),
  }),
}))
