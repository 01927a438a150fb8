/** `EventRun` and `RunStatusEvent`. */
import { withDefault } from '../src/api/args.ts'
import { seesResponseBodies, withheldResponseQuote } from '../src/api/redact.ts'
import { RunHealthEnum, RunStatusEnum } from './enums.ts'
import {
  EventDefinitionRef,
  EventRunRef,
  EventVersionRef,
  RunLogRef,
  RunStatusEventRef,
  RunStepRef,
} from './refs.ts'

/** A row a foreign key guarantees; missing means it was deleted under us. */
function present<T>(value: T | null | undefined, what: string): T {
  if (value === null || value === undefined) throw new Error(`${what} is missing`)
  return value
}

EventRunRef.implement({
  description: 'One occurrence of a definition in one scope, driven through the steps of its pinned version.',
  fields: (t) => ({
    id: t.exposeID('id'),
    definition: t.field({
      type: EventDefinitionRef,
      resolve: (run, _args, ctx) =>
        ctx.loaders.knownDefinition(run.definitionId) ??
        ctx.loaders.definition
          .load(run.definitionId)
          .then((d) => present(d, `definition ${run.definitionId}`)),
    }),
    version: t.field({
      type: EventVersionRef,
      description: 'The version pinned when the run was made; publishing never changes it.',
      resolve: (run, _args, ctx) =>
        ctx.loaders.knownVersion(run.versionId) ??
        ctx.loaders.version.load(run.versionId).then((v) => present(v, `version ${run.versionId}`)),
    }),
    scope: t.exposeString('scope'),
    scheduledFor: t.expose('scheduledFor', { type: 'DateTime' }),
    timezone: t.exposeString('timezone'),
    concurrencyKey: t.exposeString('concurrencyKey', {
      nullable: true,
      description: 'The resolved key; null for rehearsals and key-less definitions.',
    }),
    params: t.expose('params', { type: 'JSON', nullable: true }),
    rehearsal: t.exposeBoolean('rehearsal'),
    startedBy: t.exposeString('startedBy', {
      nullable: true,
      description: '"schedule", or the actor who started it.',
    }),
    status: t.expose('status', { type: RunStatusEnum }),
    health: t.expose('health', { type: RunHealthEnum }),
    currentPhase: t.exposeString('currentPhase', { nullable: true }),
    lastError: t.string({
      nullable: true,
      description:
        'Why the run failed or degraded. A quoted webhook response body reads as withheld unless the caller is an operator or admin.',
      resolve: (run, _args, ctx) =>
        seesResponseBodies(ctx) ? run.lastError : withheldResponseQuote(run.lastError),
    }),
    claimedBy: t.exposeString('claimedBy', {
      nullable: true,
      description: 'The runner instance working on it now.',
    }),
    claimExpiresAt: t.expose('claimExpiresAt', { type: 'DateTime', nullable: true }),
    startedAt: t.expose('startedAt', { type: 'DateTime', nullable: true }),
    endedAt: t.expose('endedAt', { type: 'DateTime', nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
    waitingSteps: t.exposeInt('waitingSteps', {
      description: 'Steps parked on a person (cues); never timers.',
    }),
    steps: t.field({
      type: [RunStepRef],
      description: 'Every step, in program order.',
      resolve: (run, _args, ctx) => {
        // A step's wakeAt reads its run's status (null while PAUSED): answer it from this row.
        ctx.loaders.rememberRuns([run])
        return ctx.loaders.stepsByRun.load(run.id)
      },
    }),
    logs: t.field({
      type: [RunLogRef],
      description: 'Newest first; limit clamped to 1..500.',
      args: { limit: t.arg.int({ defaultValue: 100 }) },
      resolve: (run, args, ctx) => ctx.loaders.logsByRun(withDefault(args.limit, 100)).load(run.id),
    }),
    concurrencyHolder: t.field({
      type: EventRunRef,
      nullable: true,
      description: 'Another run holding this run’s concurrency key right now (what blocks it), if any.',
      resolve: async (run, _args, ctx) => {
        if (!run.concurrencyKey) return null
        const holders = await ctx.loaders.keyHolders.load(run.concurrencyKey)
        const holder = holders.find((h) => h.id !== run.id)
        return holder ? ctx.loaders.run.load(holder.id) : null
      },
    }),
  }),
})

RunStatusEventRef.implement({
  description: 'The live fields of a run, as the runStatus subscription sends them.',
  fields: (t) => ({
    id: t.exposeID('id'),
    status: t.expose('status', { type: RunStatusEnum }),
    health: t.expose('health', { type: RunHealthEnum }),
    currentPhase: t.exposeString('currentPhase', { nullable: true }),
    waitingSteps: t.exposeInt('waitingSteps'),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
  }),
})
