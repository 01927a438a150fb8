/** `EventDefinition`: what an event is and when it happens. */
import { withDefault } from '../src/api/args.ts'
import { takeOccurrences } from '../src/api/queryBudget.ts'
import { badInput } from '../src/errors.ts'
import { MAX_NEXT_OCCURRENCES, nextOccurrences } from '../src/runner/schedule.ts'
import { DefinitionStateEnum, OverlapPolicyEnum } from './enums.ts'
import { EventDefinitionRef, EventVersionRef } from './refs.ts'

EventDefinitionRef.implement({
  description: 'An event: its schedule (cron in a time zone, per scope) and its current program version.',
  fields: (t) => ({
    id: t.exposeID('id'),
    slug: t.exposeString('slug', { description: 'Unique and immutable.' }),
    title: t.exposeString('title'),
    description: t.exposeString('description', { nullable: true }),
    schedule: t.exposeString('schedule', {
      nullable: true,
      description: '5- or 6-field cron in `timezone`; null = started by hand only.',
    }),
    timezone: t.exposeString('timezone'),
    graceSeconds: t.exposeInt('graceSeconds', {
      description: 'How late a scheduled run may start before it is MISSED.',
    }),
    concurrencyKey: t.exposeString('concurrencyKey', {
      nullable: true,
      description: 'A template such as "world:{{run.scope}}"; runs with the same resolved key never overlap.',
    }),
    scopes: t.exposeStringList('scopes'),
    state: t.expose('state', { type: DefinitionStateEnum }),
    overlap: t.expose('overlap', {
      type: OverlapPolicyEnum,
      description: 'Applied per scope when an occurrence comes due while an earlier run is in progress.',
    }),
    startsAt: t.expose('startsAt', {
      type: 'DateTime',
      nullable: true,
      description: 'The schedule has no occurrence before this instant.',
    }),
    endsAt: t.expose('endsAt', {
      type: 'DateTime',
      nullable: true,
      description: 'The schedule has no occurrence after this instant.',
    }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
    updatedAt: t.expose('updatedAt', { type: 'DateTime' }),
    currentVersion: t.field({
      type: EventVersionRef,
      nullable: true,
      resolve: (def, _args, ctx) =>
        def.currentVersionId === null ? null : ctx.loaders.version.load(def.currentVersionId),
    }),
    versions: t.field({
      type: [EventVersionRef],
      description: 'Newest first.',
      resolve: (def, _args, ctx) => ctx.loaders.versionsByDefinition.load(def.id),
    }),
    nextOccurrences: t.field({
      type: ['DateTime'],
      description:
        'The next `count` (1..1000) occurrences strictly after `after` (default: now), in UTC, inside startsAt/endsAt. Empty for a manual-only definition.',
      args: {
        count: t.arg.int({ defaultValue: 5 }),
        after: t.arg({ type: 'DateTime' }),
      },
      resolve: (def, args, ctx) => {
        const count = withDefault(args.count, 5)
        const after = args.after ?? ctx.services.clock.now()
        // Checked even for a manual-only definition, so a bad count is never silently accepted.
        if (!Number.isInteger(count) || count < 1 || count > MAX_NEXT_OCCURRENCES) {
          throw badInput(`count must be an integer from 1 to ${MAX_NEXT_OCCURRENCES}; got ${count}.`)
        }
        if (def.schedule === null) return []
        takeOccurrences(ctx.budget, count, ctx.services.maxOccurrences)
        return nextOccurrences(def.schedule, def.timezone, { count, after, bounds: def })
      },
    }),
  }),
})
