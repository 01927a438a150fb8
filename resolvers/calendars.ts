/** Calendars (list: viewer; changes: admin) and one-off changes of an occurrence (operator). */
import { builder } from '../schema/builder.ts'
import { CalendarInput, CalendarRef, OccurrenceRef } from '../schema/calendar.ts'
import * as calendarsSql from '../sql/calendars.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import {
  type CalendarDeps,
  createCalendar,
  deleteCalendar,
  updateCalendar,
} from '../src/operations/calendars.ts'
import { moveOccurrence, type OccurrenceDeps, skipOccurrence } from '../src/operations/occurrences.ts'
import { actorOf } from './deps.ts'

function calendarDeps(ctx: ApiContext): CalendarDeps {
  const s = ctx.services
  return { db: s.db, clock: s.clock, nudgeMaterialise: () => s.requestMaterialise() }
}

function occurrenceDeps(ctx: ApiContext): OccurrenceDeps {
  const s = ctx.services
  return { db: s.db, clock: s.clock, nudge: () => s.nudge() }
}

builder.queryFields((t) => ({
  calendars: t.field({
    type: [CalendarRef],
    description: 'Every blackout calendar, by name.',
    extensions: requires('viewer'),
    resolve: (_root, _args, ctx) => calendarsSql.list(ctx.services.db),
  }),
}))

builder.mutationFields((t) => ({
  createCalendar: t.field({
    type: CalendarRef,
    description: 'A new named blackout calendar (names are unique).',
    extensions: requires('admin'),
    args: { input: t.arg({ type: CalendarInput, required: true }) },
    resolve: (_root, { input }, ctx) => createCalendar(calendarDeps(ctx), input, actorOf(ctx)),
  }),
  updateCalendar: t.field({
    type: CalendarRef,
    description:
      'Replace a calendar. Never-started runs the schedule made on a day it now blacks out are withdrawn; occurrences it frees inside the horizon are made.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }), input: t.arg({ type: CalendarInput, required: true }) },
    resolve: (_root, args, ctx) =>
      updateCalendar(calendarDeps(ctx), parseId(args.id, 'id'), args.input, actorOf(ctx)),
  }),
  deleteCalendar: t.field({
    type: 'Boolean',
    description: 'Delete a calendar; CONFLICT while a definition observes it.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => deleteCalendar(calendarDeps(ctx), parseId(args.id, 'id'), actorOf(ctx)),
  }),
  skipOccurrence: t.field({
    type: OccurrenceRef,
    description:
      'Skip one occurrence (before or after its run is made; a made, never-started run is withdrawn). Idempotent; audited with the reason.',
    extensions: requires('operator'),
    args: {
      definitionId: t.arg.id({ required: true }),
      at: t.arg({ type: 'DateTime', required: true }),
      scope: t.arg.string(),
      reason: t.arg.string({ required: true }),
    },
    resolve: (_root, args, ctx) =>
      skipOccurrence(occurrenceDeps(ctx), {
        definitionId: parseId(args.definitionId, 'definitionId'),
        at: args.at,
        scope: args.scope ?? null,
        reason: args.reason,
        actor: actorOf(ctx),
      }),
  }),
  moveOccurrence: t.field({
    type: OccurrenceRef,
    description:
      'Move one occurrence (identified by its original instant `at`) to `to`; moving it again moves the same run again. Idempotent; audited.',
    extensions: requires('operator'),
    args: {
      definitionId: t.arg.id({ required: true }),
      at: t.arg({ type: 'DateTime', required: true }),
      to: t.arg({ type: 'DateTime', required: true }),
      scope: t.arg.string(),
      reason: t.arg.string(),
    },
    resolve: (_root, args, ctx) =>
      moveOccurrence(occurrenceDeps(ctx), {
        definitionId: parseId(args.definitionId, 'definitionId'),
        at: args.at,
        to: args.to,
        scope: args.scope ?? null,
        reason: args.reason ?? null,
        actor: actorOf(ctx),
      }),
  }),
}))
