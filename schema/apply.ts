/** `ApplyAction`, `ApplyChange` and `ApplyPlan`: what applyDefinitions answers (shows as code). */
import type { ApplyChange, ApplyPlan } from '../src/operations/apply.ts'
import { builder } from './builder.ts'

export const ApplyActionEnum = builder.enumType('ApplyAction', {
  description:
    'CREATE: a new definition; UPDATE: fields or the program change; UNCHANGED: the manifest says what the definition is; ARCHIVE: the definition is archived (its manifest says ARCHIVED, or prune found no manifest for it).',
  values: {
    CREATE: { value: 'create' },
    UPDATE: { value: 'update' },
    UNCHANGED: { value: 'unchanged' },
    ARCHIVE: { value: 'archive' },
  } as const,
})

export const ApplyChangeRef = builder.objectRef<ApplyChange>('ApplyChange').implement({
  description: 'One definition in a plan.',
  fields: (t) => ({
    slug: t.exposeString('slug'),
    action: t.field({ type: ApplyActionEnum, resolve: (c) => c.action }),
    fields: t.exposeStringList('fields', {
      description:
        'The manifest fields that differ ("program" when the program does); every set field for CREATE.',
    }),
    newVersion: t.exposeInt('newVersion', {
      nullable: true,
      description:
        'The version published (in a dry run: the one that would be); null when the program stays.',
    }),
  }),
})

export const ApplyPlanRef = builder.objectRef<ApplyPlan>('ApplyPlan').implement({
  description: 'Every manifest in order, then the definitions prune archives.',
  fields: (t) => ({
    changes: t.field({ type: [ApplyChangeRef], resolve: (p) => p.changes }),
    applied: t.exposeBoolean('applied', {
      description: 'false for a dry run: nothing was written.',
    }),
  }),
})
