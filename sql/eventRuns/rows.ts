/**
 * `event_runs` row shapes and the column lists every reader shares: how a
 * stored run becomes a typed object, and how a page of runs gets its count of
 * steps parked on a person.
 */

import type { Queryable } from '../db.ts'
import { parseJson, placeholders } from '../json.ts'
import type { RunHealth, RunStatus } from '../states.ts'

/** A run as stored, with typed fields. */
export interface RunRow {
  id: number
  definitionId: number
  versionId: number
  scope: string
  scheduledFor: Date
  timezone: string
  concurrencyKey: string | null
  params: Record<string, unknown> | null
  rehearsal: boolean
  startedBy: string | null
  /** The overlap policy it starts under; null = allow_all (the set-wise start path). */
  overlap: 'skip' | 'buffer_one' | 'cancel_other' | null
  /** True when its grace window does not apply (backfilled, or held back by BUFFER_ONE). */
  graceExempt: boolean
  /** A rehearsal's speed: its timers run 1/speed as long. 1 for every other run. */
  speed: number
  /** The FAILED run this one retries, or null. */
  retryOf: number | null
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  lastError: string | null
  claimedBy: string | null
  claimExpiresAt: Date | null
  claimToken: string | null
  wakeAt: Date | null
  /** When a `scheduled` run becomes missed (its start instant plus its grace); null once it left `scheduled`. */
  missedAt: Date | null
  startedAt: Date | null
  endedAt: Date | null
  createdAt: Date
  updatedAt: Date
}

/** A run as the admin list shows it. */
export interface RunListRow extends RunRow {
  definitionTitle: string
  definitionSlug: string
  versionNumber: number
  /** Steps parked on a person (cues), never timers. */
  waitingSteps: number
}

/**
 * The runs the key-less start locks and starts (startLock.ts): no concurrency
 * key and no overlap policy. Their scheduled `wake_at` is NULL (migration
 * 0030); the converse, {@link STARTS_BY_OWN_CLAIM}, starts by a claim of its
 * own (claimStart.ts) and is found through `keyed_due_at`. Spelled for the
 * alias `r`; `newRunValues` (materialise.ts) applies the same rule to the
 * values of a run about to be made, and migration 0030 spells it in its file.
 */
export const STARTS_UNDER_ROW_LOCK = 'r.concurrency_key IS NULL AND r.overlap IS NULL'
export const STARTS_BY_OWN_CLAIM = '(r.concurrency_key IS NOT NULL OR r.overlap IS NOT NULL)'

export const RUN_COLUMNS = `r.id, r.definition_id, r.version_id, r.scope, r.scheduled_for, r.timezone, r.concurrency_key,
  r.params, r.rehearsal, r.started_by, r.status, r.health, r.current_phase, r.last_error, r.claimed_by,
  r.claim_expires_at, r.claim_token, r.wake_at, r.missed_at, r.started_at, r.ended_at, r.created_at, r.updated_at,
  r.overlap, r.grace_exempt, r.speed, r.retry_of`

// `waitingSteps` counts PARKED steps only: a cue waiting on a person. It is
// derived from the steps rather than stored on the run, because a column would
// be a second writer's opinion of them; a cue nobody notices is a run that never
// advances while looking healthy. The seed computed it as a correlated subquery
// in the list SELECT. On MariaDB 10.11 that shape (a prepared statement sorting
// through a temporary table with a dependent subquery) crashed the server once
// under concurrent load (signal 11 in free_tmp_table), so the page is read first
// and the counts for its (at most 500) runs come from one grouped query.
export const WAITING_SUBQUERY = `(SELECT COUNT(*) FROM event_run_steps s
    WHERE s.run_id = r.id AND s.status = 'running' AND s.parked = 1)`

export const LIST_COLUMNS = `${RUN_COLUMNS}, d.title AS definition_title, d.slug AS definition_slug,
  v.version AS version_number`

export const SELECT_LIST = `
  SELECT ${LIST_COLUMNS}
    FROM event_runs r
    JOIN event_definitions d ON d.id = r.definition_id
    JOIN event_versions    v ON v.id = r.version_id`

/**
 * Attach parked-step counts to a page of list rows: one grouped query for the
 * whole page. Each run object is built once, count included: a page is up to
 * 500 rows per request, and spreading a copy of every row (then a copy of that)
 * was a measurable share of the API's allocation and GC under load.
 */
export async function withWaiting(db: Queryable, rows: Raw[]): Promise<RunListRow[]> {
  if (rows.length === 0) return []
  const ids = rows.map((r) => Number(r.id))
  const counts = await db.query<Raw>(
    `SELECT run_id, COUNT(*) AS n FROM event_run_steps
      WHERE run_id IN (${placeholders(ids.length)}) AND status = 'running' AND parked = 1
      GROUP BY run_id`,
    ids,
  )
  const byRun = new Map<number, number>()
  for (const c of counts) byRun.set(Number(c.run_id), Number(c.n))
  const out = new Array<RunListRow>(rows.length)
  for (let i = 0; i < rows.length; i++) {
    out[i] = hydrateList(rows[i] as Raw, byRun.get(ids[i] as number) ?? 0)
  }
  return out
}

export const SELECT_RUN = `SELECT ${RUN_COLUMNS} FROM event_runs r`

export type Raw = Record<string, unknown>

export function hydrate(row: Raw): RunRow {
  return {
    id: Number(row.id),
    definitionId: Number(row.definition_id),
    versionId: Number(row.version_id),
    scope: String(row.scope ?? ''),
    scheduledFor: row.scheduled_for as Date,
    timezone: String(row.timezone),
    concurrencyKey: (row.concurrency_key as string | null) ?? null,
    params: parseJson<Record<string, unknown> | null>(row.params, null),
    rehearsal: Boolean(Number(row.rehearsal)),
    startedBy: (row.started_by as string | null) ?? null,
    overlap: (row.overlap as RunRow['overlap']) ?? null,
    graceExempt: Boolean(Number(row.grace_exempt ?? 0)),
    speed: row.speed == null ? 1 : Number(row.speed),
    retryOf: row.retry_of == null ? null : Number(row.retry_of),
    status: row.status as RunStatus,
    health: row.health as RunHealth,
    currentPhase: (row.current_phase as string | null) ?? null,
    lastError: (row.last_error as string | null) ?? null,
    claimedBy: (row.claimed_by as string | null) ?? null,
    claimExpiresAt: (row.claim_expires_at as Date | null) ?? null,
    claimToken: (row.claim_token as string | null) ?? null,
    wakeAt: (row.wake_at as Date | null) ?? null,
    missedAt: (row.missed_at as Date | null) ?? null,
    startedAt: (row.started_at as Date | null) ?? null,
    endedAt: (row.ended_at as Date | null) ?? null,
    createdAt: row.created_at as Date,
    updatedAt: row.updated_at as Date,
  }
}

// The run object is extended in place rather than spread into a new one: one
// allocation per row matters on a 500-row page (bench/apiLatency.ts).
export function hydrateList(row: Raw, waitingSteps: number): RunListRow {
  const run = hydrate(row) as RunListRow
  run.definitionTitle = String(row.definition_title)
  run.definitionSlug = String(row.definition_slug)
  run.versionNumber = Number(row.version_number)
  run.waitingSteps = waitingSteps
  return run
}

/** A run with its definition's title and slug: what step templates and notifications name it by. */
export type RunWithDefinition = RunRow & { definitionTitle: string; definitionSlug: string }

/** The columns {@link hydrateWithDefinition} reads beside `RUN_COLUMNS` (from `event_definitions d`). */
export const DEFINITION_NAME_COLUMNS = 'd.title AS definition_title, d.slug AS definition_slug'

/** A row of `RUN_COLUMNS, DEFINITION_NAME_COLUMNS` as a run, extended in place like {@link hydrateList}. */
export function hydrateWithDefinition(row: Raw): RunWithDefinition {
  const run = hydrate(row) as RunWithDefinition
  run.definitionTitle = String(row.definition_title)
  run.definitionSlug = String(row.definition_slug)
  return run
}

/** `RUN_COLUMNS` renamed `r__<column>`, so that they can sit beside a step's own in one row. */
export const PREFIXED_RUN_COLUMNS = RUN_COLUMNS.split(',')
  .map((c) => c.trim().slice('r.'.length))
  .map((column) => `r.${column} AS r__${column}`)
  .join(', ')

/** The run of a row of `PREFIXED_RUN_COLUMNS, DEFINITION_NAME_COLUMNS` (beside a step's columns). */
export function hydratePrefixedWithDefinition(row: Raw): RunWithDefinition {
  const runRow: Raw = { definition_title: row.definition_title, definition_slug: row.definition_slug }
  for (const key of Object.keys(row)) if (key.startsWith('r__')) runRow[key.slice(3)] = row[key]
  return hydrateWithDefinition(runRow)
}

/** Put a page's rows back in `scheduled_for, id` order (a join over a derived page does not keep it). */
export function sortRows(rows: Raw[], order: 'newest first' | 'oldest first'): Raw[] {
  const sign = order === 'newest first' ? -1 : 1
  return rows.sort(
    (a, b) =>
      sign * ((a.scheduled_for as Date).getTime() - (b.scheduled_for as Date).getTime()) ||
      sign * (Number(a.id) - Number(b.id)),
  )
}
