/** Definitions: list and look-up (viewer), create/update/publish/state (admin). */

import { builder } from '../schema/builder.ts'
import { DefinitionStateEnum } from '../schema/enums.ts'
import { CreateDefinitionInput, UpdateDefinitionInput } from '../schema/inputs.ts'
import { EventDefinitionRef, EventVersionRef } from '../schema/refs.ts'
import type { DefinitionPatch } from '../sql/eventDefinitions.ts'
import * as definitions from '../sql/eventDefinitions.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { badInput } from '../src/errors.ts'
import {
  createDefinition,
  publishVersion,
  setDefinitionState,
  updateDefinition,
} from '../src/operations/definitions.ts'
import { actorOf, definitionDeps } from './deps.ts'

/** Fields of UpdateDefinitionInput whose column cannot be NULL: null there is a mistake, not "clear". */
const NOT_NULLABLE = ['title', 'timezone', 'graceSeconds', 'scopes', 'overlap', 'calendars'] as const

builder.queryFields((t) => ({
  definitions: t.field({
    type: [EventDefinitionRef],
    description: 'By slug. Archived definitions only when includeArchived is true.',
    extensions: requires('viewer'),
    args: { includeArchived: t.arg.boolean({ defaultValue: false }) },
    resolve: async (_root, args, ctx) => {
      const list = await definitions.list(ctx.services.db, { includeArchived: args.includeArchived === true })
      for (const def of list) ctx.loaders.definition.prime(def.id, def)
      return list
    },
  }),
  definition: t.field({
    type: EventDefinitionRef,
    nullable: true,
    description: 'By id or by slug (exactly one of them); null when none matches.',
    extensions: requires('viewer'),
    args: { id: t.arg.id(), slug: t.arg.string() },
    resolve: async (_root, args, ctx) => {
      const hasId = args.id !== null && args.id !== undefined
      const hasSlug = args.slug !== null && args.slug !== undefined
      if (hasId === hasSlug) throw badInput('Give exactly one of id or slug.')
      if (hasId) return ctx.loaders.definition.load(parseId(args.id, 'id'))
      const slug = String(args.slug)
      // No slug is longer than 100 characters; do not send a megabyte to the database to learn that.
      if (slug.length > 100) return null
      return definitions.getBySlug(ctx.services.db, slug)
    },
  }),
}))

builder.mutationFields((t) => ({
  createDefinition: t.field({
    type: EventDefinitionRef,
    description: 'Create a definition; its program becomes version 1.',
    extensions: requires('admin'),
    args: { input: t.arg({ type: CreateDefinitionInput, required: true }) },
    resolve: (_root, { input }, ctx) =>
      createDefinition(
        definitionDeps(ctx),
        {
          slug: input.slug,
          title: input.title,
          description: input.description ?? null,
          schedule: input.schedule ?? null,
          timezone: input.timezone ?? 'UTC',
          graceSeconds: input.graceSeconds ?? 300,
          concurrencyKey: input.concurrencyKey ?? null,
          scopes: input.scopes ?? [''],
          state: input.state ?? 'active',
          program: input.program,
          overlap: input.overlap ?? 'allow_all',
          startsAt: input.startsAt ?? null,
          endsAt: input.endsAt ?? null,
          ...(input.calendars != null && { calendars: input.calendars }),
        },
        actorOf(ctx),
      ),
  }),
  updateDefinition: t.field({
    type: EventDefinitionRef,
    description: 'Change fields; omitted ones stay. A schedule change re-plans future scheduled runs.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }), input: t.arg({ type: UpdateDefinitionInput, required: true }) },
    resolve: (_root, args, ctx) => {
      const id = parseId(args.id, 'id')
      const input = args.input
      const nulls = NOT_NULLABLE.filter((k) => input[k] === null)
      if (nulls.length > 0) {
        throw badInput(
          `${nulls.join(', ')} cannot be null; omit ${nulls.length === 1 ? 'it' : 'them'} to leave ${nulls.length === 1 ? 'it' : 'them'} unchanged.`,
        )
      }
      const patch: DefinitionPatch & { calendars?: string[] } = {}
      if (input.title != null) patch.title = input.title
      if (input.timezone != null) patch.timezone = input.timezone
      if (input.graceSeconds != null) patch.graceSeconds = input.graceSeconds
      if (input.scopes != null) patch.scopes = input.scopes
      if (input.description !== undefined) patch.description = input.description
      if (input.schedule !== undefined) patch.schedule = input.schedule
      if (input.concurrencyKey !== undefined) patch.concurrencyKey = input.concurrencyKey
      if (input.overlap != null) patch.overlap = input.overlap
      if (input.startsAt !== undefined) patch.startsAt = input.startsAt
      if (input.endsAt !== undefined) patch.endsAt = input.endsAt
      if (input.calendars != null) patch.calendars = input.calendars
      return updateDefinition(definitionDeps(ctx), id, patch, actorOf(ctx))
    },
  }),
  publishVersion: t.field({
    type: EventVersionRef,
    description: 'Publish a new immutable program version; new runs pin it, existing runs keep theirs.',
    extensions: requires('admin'),
    args: { definitionId: t.arg.id({ required: true }), program: t.arg({ type: 'JSON', required: true }) },
    resolve: (_root, args, ctx) =>
      publishVersion(
        definitionDeps(ctx),
        parseId(args.definitionId, 'definitionId'),
        args.program,
        actorOf(ctx),
      ),
  }),
  setDefinitionState: t.field({
    type: EventDefinitionRef,
    description:
      'ACTIVE, PAUSED or ARCHIVED. PAUSED withdraws the never-started runs the schedule made (runs a person scheduled stay); ACTIVE resumes the schedule from now. ARCHIVED also cancels runs a person scheduled, and is refused (CONFLICT) while a run is in progress.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }), state: t.arg({ type: DefinitionStateEnum, required: true }) },
    resolve: (_root, args, ctx) =>
      setDefinitionState(definitionDeps(ctx), parseId(args.id, 'id'), args.state, actorOf(ctx)),
  }),
}))
