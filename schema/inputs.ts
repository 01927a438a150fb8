/** Input objects of the definition mutations. */
import { builder } from './builder.ts'
import { DefinitionStateEnum, OverlapPolicyEnum } from './enums.ts'

export const CreateDefinitionInput = builder.inputType('CreateDefinitionInput', {
  description: 'A new definition; `program` becomes its version 1.',
  fields: (t) => ({
    slug: t.string({
      required: true,
      description: 'Unique, immutable: lowercase letters, digits, ".", "_", "-".',
    }),
    title: t.string({ required: true }),
    description: t.string(),
    schedule: t.string({ description: '5- or 6-field cron; null or omitted = manual only.' }),
    timezone: t.string({ defaultValue: 'UTC', description: 'IANA zone, e.g. "Europe/London".' }),
    graceSeconds: t.int({ defaultValue: 300 }),
    concurrencyKey: t.string(),
    scopes: t.stringList({ defaultValue: [''] }),
    state: t.field({ type: DefinitionStateEnum, defaultValue: 'active' }),
    program: t.field({ type: 'JSON', required: true }),
    overlap: t.field({ type: OverlapPolicyEnum, defaultValue: 'allow_all' }),
    startsAt: t.field({ type: 'DateTime', description: 'No occurrence before this instant.' }),
    endsAt: t.field({ type: 'DateTime', description: 'No occurrence after this instant.' }),
    calendars: t.stringList({ description: 'Names of the blackout calendars it observes.' }),
  }),
})

export const UpdateDefinitionInput = builder.inputType('UpdateDefinitionInput', {
  description:
    'Omitted fields are unchanged; null clears description, schedule and concurrencyKey. The slug is immutable.',
  fields: (t) => ({
    title: t.string(),
    description: t.string(),
    schedule: t.string(),
    timezone: t.string(),
    graceSeconds: t.int(),
    concurrencyKey: t.string(),
    scopes: t.stringList(),
    overlap: t.field({ type: OverlapPolicyEnum }),
    startsAt: t.field({ type: 'DateTime', description: 'null removes the bound.' }),
    endsAt: t.field({ type: 'DateTime', description: 'null removes the bound.' }),
    calendars: t.stringList({ description: 'Names of the blackout calendars it observes; [] = none.' }),
  }),
})
