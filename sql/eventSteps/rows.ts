import { parseJson } from '../json.ts'
import type { StepOnError, StepStatus } from '../states.ts'

/** One step of an expanded program: what a run's step row is made from. */
export interface StepSpec {
  /** Position in the whole program, 0-based. */
  seq: number
  phaseIndex: number
  phase: string
  ending: boolean
  kind: string
  params: Record<string, unknown>
  maxAttempts: number
  backoffMs: number
  timeoutMs: number
  onError: StepOnError
}

export interface StepRow {
  id: number
  runId: number
  seq: number
  phaseIndex: number
  phase: string
  ending: boolean
  kind: string
  params: Record<string, unknown> | null
  maxAttempts: number
  backoffMs: number
  timeoutMs: number
  onError: StepOnError
  status: StepStatus
  parked: boolean
  attempts: number
  wakeAt: Date | null
  claimedBy: string | null
  claimExpiresAt: Date | null
  startedAt: Date | null
  endedAt: Date | null
  lastError: string | null
  result: unknown
  updatedAt: Date
}

export type Raw = Record<string, unknown>

export const STEP_COLUMNS = `s.id, s.run_id, s.seq, s.phase_index, s.phase, s.ending, s.kind, s.params, s.max_attempts,
  s.backoff_ms, s.timeout_ms, s.on_error, s.status, s.parked, s.attempts, s.wake_at, s.claimed_by,
  s.claim_expires_at, s.started_at, s.ended_at, s.last_error, s.result, s.updated_at`

export const SELECT_STEP = `SELECT ${STEP_COLUMNS} FROM event_run_steps s`

/**
 * {@link STEP_COLUMNS} of the step aliased `alias`, each named
 * `<alias>__<column>`: a second step in one row beside `s`'s.
 */
export function prefixedStepColumns(alias: string): string {
  return STEP_COLUMNS.split(',')
    .map((c) => c.trim().slice('s.'.length))
    .map((col) => `${alias}.${col} AS ${alias}__${col}`)
    .join(', ')
}

/** The step read by {@link prefixedStepColumns}; null where a LEFT JOIN found none. */
export function hydratePrefixedStep(row: Raw, alias: string): StepRow | null {
  const prefix = `${alias}__`
  if (row[`${prefix}id`] === null || row[`${prefix}id`] === undefined) return null
  const own: Raw = {}
  for (const [key, value] of Object.entries(row))
    if (key.startsWith(prefix)) own[key.slice(prefix.length)] = value
  return hydrate(own)
}

export function hydrate(row: Raw): StepRow {
  return {
    id: Number(row.id),
    runId: Number(row.run_id),
    seq: Number(row.seq),
    phaseIndex: Number(row.phase_index),
    phase: String(row.phase),
    ending: Boolean(Number(row.ending)),
    kind: String(row.kind),
    params: parseJson<Record<string, unknown> | null>(row.params, null),
    maxAttempts: Number(row.max_attempts),
    backoffMs: Number(row.backoff_ms),
    timeoutMs: Number(row.timeout_ms),
    onError: row.on_error as StepOnError,
    status: row.status as StepStatus,
    parked: Boolean(Number(row.parked)),
    attempts: Number(row.attempts),
    wakeAt: (row.wake_at as Date | null) ?? null,
    claimedBy: (row.claimed_by as string | null) ?? null,
    claimExpiresAt: (row.claim_expires_at as Date | null) ?? null,
    startedAt: (row.started_at as Date | null) ?? null,
    endedAt: (row.ended_at as Date | null) ?? null,
    lastError: (row.last_error as string | null) ?? null,
    result: parseJson<unknown>(row.result, null),
    updatedAt: row.updated_at as Date,
  }
}
