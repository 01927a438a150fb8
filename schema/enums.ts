/**
 * The state enums: the uppercase of the stored lowercase values, which are what
 * resolvers see (`'running'`), so rows pass through without mapping.
 */
import {
  DEFINITION_STATES,
  OVERLAP_POLICIES,
  RUN_HEALTHS,
  RUN_STATUSES,
  STEP_STATUSES,
} from '../sql/states.ts'
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
    'A PAUSED definition starts nothing from its schedule (runs a person scheduled still start); an ARCHIVED one is hidden and cannot start runs.',
  values: valuesOf(DEFINITION_STATES),
})

export const OverlapPolicyEnum = builder.enumType('OverlapPolicy', {
  description:
    'What an occurrence does when it comes due while an earlier run of the same definition and scope is in progress: ALLOW_ALL starts it anyway; SKIP marks it MISSED; BUFFER_ONE holds the newest such occurrence until the earlier run ends (an older held one becomes MISSED); CANCEL_OTHER cancels the earlier run, then starts it.',
  values: valuesOf(OVERLAP_POLICIES),
})
