/** The calendar: blackout calendars, occurrences (`upcoming`), and the definition's links to both. */
import type { CalendarEntryRow, CalendarRow } from '../sql/calendars.ts'
import * as calendarsSql from '../sql/calendars.ts'
import { withDefault } from '../src/api/args.ts'
import { takeOccurrences } from '../src/api/queryBudget.ts'
import type { Occurrence } from '../src/operations/occurrences.ts'
import { MAX_UPCOMING, upcoming } from '../src/operations/occurrences.ts'
import { builder } from './builder.ts'
import { EventDefinitionRef, EventRunRef } from './refs.ts'

export const CalendarRef = builder.objectRef<CalendarRow>('Calendar')
export const CalendarEntryRef = builder.objectRef<CalendarEntryRow>('CalendarEntry')
export const OccurrenceRef = builder.objectRef<Occurrence>('Occurrence')

export const OccurrenceStatusEnum = builder.enumType('OccurrenceStatus', {
  description:
    'SCHEDULED: it will run (its run once made); BLACKOUT: on a day a calendar blacks out; SKIPPED: a person skipped it; MOVED: a person moved it (movedTo says where).',
  values: {
    SCHEDULED: { value: 'scheduled' },
    BLACKOUT: { value: 'blackout' },
    SKIPPED: { value: 'skipped' },
    MOVED: { value: 'moved' },
  } as const,
})

CalendarEntryRef.implement({
  description:
    'Blacked-out local dates (YYYY-MM-DD, both inclusive); yearly entries match month and day every year.',
  fields: (t) => ({
    from: t.exposeString('from'),
    to: t.exposeString('to'),
    yearly: t.exposeBoolean('yearly'),
    label: t.exposeString('label', { nullable: true }),
  }),
})

CalendarRef.implement({
  description: 'A named blackout calendar; its days are read in its own time zone.',
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    timezone: t.exposeString('timezone'),
    entries: t.field({ type: [CalendarEntryRef], resolve: (c) => c.entries }),
  }),
})

OccurrenceRef.implement({
  description: 'One occurrence of a schedule in one scope, and what will happen to it.',
  fields: (t) => ({
    at: t.expose('at', {
      type: 'DateTime',
      description: 'The schedule’s instant (for MOVED: where it was).',
    }),
    scope: t.exposeString('scope'),
    status: t.expose('status', { type: OccurrenceStatusEnum }),
    reason: t.exposeString('reason', {
      nullable: true,
      description: 'The blackout entry’s label, or the reason given for a skip or move.',
    }),
    movedTo: t.expose('movedTo', { type: 'DateTime', nullable: true }),
    run: t.field({ type: EventRunRef, nullable: true, resolve: (o) => o.run }),
  }),
})

export const CalendarEntryInput = builder.inputType('CalendarEntryInput', {
  fields: (t) => ({
    from: t.string({ required: true, description: 'Local date YYYY-MM-DD.' }),
    to: t.string({ description: 'Local date YYYY-MM-DD, inclusive; omitted = from.' }),
    yearly: t.boolean({
      defaultValue: false,
      description: 'Every year on these month-days (may wrap the new year).',
    }),
    label: t.string({ description: 'Shown for the occurrences it blacks out, e.g. "Christmas".' }),
  }),
})

export const CalendarInput = builder.inputType('CalendarInput', {
  fields: (t) => ({
    name: t.string({ required: true }),
    timezone: t.string({ required: true, description: 'IANA zone the dates are read in.' }),
    entries: t.field({ type: [CalendarEntryInput], required: true }),
  }),
})

builder.objectFields(EventDefinitionRef, (t) => ({
  calendars: t.field({
    type: [CalendarRef],
    description: 'The blackout calendars it observes, by name.',
    resolve: async (def, _args, ctx) =>
      (await calendarsSql.ofDefinitions(ctx.services.db, [def.id])).get(def.id) ?? [],
  }),
  upcoming: t.field({
    type: [OccurrenceRef],
    description: `The next \`count\` (1..${MAX_UPCOMING}) occurrences after \`after\` (default: now), per scope (default: every scope), with blackout days, skips and moves; a moved occurrence appears twice: MOVED where it was, SCHEDULED where it went.`,
    args: {
      count: t.arg.int({ defaultValue: 10 }),
      after: t.arg({ type: 'DateTime' }),
      scope: t.arg.string(),
    },
    resolve: (def, args, ctx) => {
      const count = withDefault(args.count, 10)
      if (Number.isInteger(count) && count >= 1 && count <= MAX_UPCOMING)
        takeOccurrences(ctx.budget, count, ctx.services.maxOccurrences)
      return upcoming(ctx.services.db, def, {
        count,
        after: args.after ?? ctx.services.clock.now(),
        scope: args.scope ?? null,
      })
    },
  }),
}))
