/**
 * The state enums: the uppercase of the stored lowercase values, which are what
 * resolvers see (`'running'`), so rows pass through without mapping.
 */
import { DEFINITION_STATES, RUN_HEALTHS, RUN_STATUSES, STEP_STATUSES } from '../sql/states.ts'
import { builder } from './builder.ts'

function valuesOf<const T extends readonly string[]>(stored: T) {
  return Object.fromEntries(stored.map((v) => [v.toUpperCase(), { value: v }])) as {
    [K in T[number] as Uppercase<K>]: { value: K }
  }
}

export const RunStatusEnum = builder.enumType('RunStatus', {
  description:
    'scheduled → starting → running ⇄ paused, running → ending; COMPLETED, CANCELLED, FAILED and MISSED are terminal.',
  values: valuesOf(RUN_STATUSES),
})

export const RunHealthEnum = builder.enumType('RunHealth', {
  description:
    'Separate from status: DEGRADED while a step is failing or retrying, or after a step failed with onError "degrade".',
  values: valuesOf(RUN_HEALTHS),
})

export const StepStatusEnum = builder.enumType('StepStatus', {
  values: valuesOf(STEP_STATUSES),
})

export const DefinitionStateEnum = builder.enumType('DefinitionState', {
  description:
    'A PAUSED definition materialises no new runs; an ARCHIVED one is hidden and cannot start runs.',
  values: valuesOf(DEFINITION_STATES),
})
