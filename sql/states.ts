/**
 * The named states of runs, steps and definitions, as stored (lowercase). The
 * GraphQL enums are the uppercase of these.
 */

/** Every status a run can have. */
export const RUN_STATUSES = [
  'scheduled',
  'starting',
  'running',
  'paused',
  'ending',
  'completed',
  'cancelled',
  'failed',
  'missed',
] as const
export type RunStatus = (typeof RUN_STATUSES)[number]

/** Statuses a run never leaves. Entering one stamps `ended_at` and drops the claim. */
export const TERMINAL = ['completed', 'cancelled', 'failed', 'missed'] as const satisfies readonly RunStatus[]
export type TerminalStatus = (typeof TERMINAL)[number]

/** Statuses in which a run holds its concurrency key. */
export const KEY_HOLDING = ['starting', 'running', 'paused', 'ending'] as const satisfies readonly RunStatus[]

/** Statuses that are not terminal (what blocks archiving a definition). */
export const NON_TERMINAL = [
  'scheduled',
  'starting',
  'running',
  'paused',
  'ending',
] as const satisfies readonly RunStatus[]

/** Statuses a tick may advance once claimed (a paused run is never advanced). */
export const IN_FLIGHT = ['starting', 'running', 'ending'] as const satisfies readonly RunStatus[]

export function isTerminal(status: string): status is TerminalStatus {
  return (TERMINAL as readonly string[]).includes(status)
}

export const RUN_HEALTHS = ['ok', 'degraded'] as const
export type RunHealth = (typeof RUN_HEALTHS)[number]

export const STEP_STATUSES = ['pending', 'running', 'completed', 'failed', 'skipped', 'cancelled'] as const
export type StepStatus = (typeof STEP_STATUSES)[number]

export const DEFINITION_STATES = ['active', 'paused', 'archived'] as const
export type DefinitionState = (typeof DEFINITION_STATES)[number]

export const STEP_ON_ERROR = ['fail', 'degrade'] as const
export type StepOnError = (typeof STEP_ON_ERROR)[number]

/**
 * What a definition does when an occurrence comes due while an earlier run of
 * the same definition and scope is in progress. `allow_all` starts it anyway.
 */
export const OVERLAP_POLICIES = ['allow_all', 'skip', 'buffer_one', 'cancel_other'] as const
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number]
