/**
 * `event_runs` as the API reads it: the admin list, single runs, occurrences,
 * the live fields subscriptions poll, and who holds a concurrency key.
 *
 * Lists are newest first (`scheduled_for DESC, id DESC`); a `LIMIT` reaches SQL
 * only as a clamped integer, every other value is a bound parameter.
 */

import type { Queryable, Row, Statement } from '../db.ts'
import {
  hydratePrefixedStep,
  hydrate as hydrateStep,
  prefixedStepColumns,
  STEP_COLUMNS,
  type StepRow,
} from '../eventSteps/rows.ts'
import { placeholders } from '../json.ts'
import type { RunHealth, RunStatus } from '../states.ts'
import { KEY_HOLDING, NON_TERMINAL } from '../states.ts'
import {
  DEFINITION_NAME_COLUMNS,
  hydrateList,
  hydratePrefixedWithDefinition,
  PREFIXED_RUN_COLUMNS,
  type Raw,
  type RunListRow,
  type RunWithDefinition,
  SELECT_LIST,
  sortRows,
  WAITING_SUBQUERY,
  withWaiting,
} from './rows.ts'

export async function getById(db: Queryable, id: number): Promise<RunListRow | null> {
  const rows = await db.execute<Raw>(`${SELECT_LIST} WHERE r.id = ?`, [id])
  const [run] = await withWaiting(db, rows)
  return run ?? null
}

/** The columns of the step after the answered one (`x`), beside it and its run. */
const NEXT_STEP_COLUMNS = prefixedStepColumns('x')

/**
 * A step and the run it belongs to (with its definition's names), found by the
 * step's id in one statement: what a cue's answer reads before it knows the
 * run's id, one round trip on the hot path of a GO. With them, `next`: the
 * first step after it by `seq` still `pending` or `running` (null: none),
 * which an answer that hands its run to the runner passes on, so the runner
 * begins it without reading it. Null when there is no such step (or, which
 * no key refuses, its run is gone).
 */
export async function getStepWithRun(db: Queryable, stepId: number): Promise<StepWithRun | null> {
  const st = getStepWithRunStatement(stepId)
  return stepWithRunOf(await db.execute<Raw>(st.sql, st.params))
}

/** A step with its run and the run's next unfinished step after it. */
export interface StepWithRun {
  step: StepRow
  run: RunWithDefinition
  next: StepRow | null
}

/** {@link getStepWithRun} as a statement for a batch; its rows read by {@link stepWithRunOf}. */
export function getStepWithRunStatement(stepId: number): Statement {
  return {
    sql: `SELECT ${STEP_COLUMNS}, ${PREFIXED_RUN_COLUMNS}, ${DEFINITION_NAME_COLUMNS}, ${NEXT_STEP_COLUMNS}
       FROM event_run_steps s
       JOIN event_runs r ON r.id = s.run_id
       JOIN event_definitions d ON d.id = r.definition_id
       LEFT JOIN event_run_steps x ON x.run_id = s.run_id AND x.seq = (
              SELECT MIN(n.seq) FROM event_run_steps n FORCE INDEX (uq_evstep_run_seq)
               WHERE n.run_id = s.run_id AND n.seq > s.seq AND n.status IN ('pending','running'))
      WHERE s.id = ?`,
    params: [stepId],
  }
}

/** The answer of {@link getStepWithRunStatement}: null when the step does not exist. */
export function stepWithRunOf(rows: readonly (Raw | Row)[]): StepWithRun | null {
  const [row] = rows as Raw[]
  if (!row) return null
  return {
    step: hydrateStep(row),
    run: hydratePrefixedWithDefinition(row),
    next: hydratePrefixedStep(row, 'x'),
  }
}

/**
 * Several runs by id in one statement (for batching loaders); order not
 * guaranteed. Their counts of waiting cues are read by a second one, unless
 * the caller counted them already (`waitingOf`, every waiting cue in hand).
 */
export async function getByIds(
  db: Queryable,
  ids: readonly number[],
  waitingOf: ReadonlyMap<number, number> | null = null,
): Promise<RunListRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_LIST} WHERE r.id IN (${placeholders(ids.length)})`, [...ids])
  if (waitingOf === null) return withWaiting(db, rows)
  return rows.map((row) => hydrateList(row, waitingOf.get(Number(row.id)) ?? 0))
}

/** The occurrence the unique key names, whether or not this caller created it. */
export async function findOccurrence(
  db: Queryable,
  definitionId: number,
  scope: string,
  scheduledFor: Date,
  rehearsal = false,
): Promise<RunListRow | null> {
  const rows = await db.execute<Raw>(
    `${SELECT_LIST} WHERE r.definition_id = ? AND r.scope = ? AND r.scheduled_for = ? AND r.rehearsal = ?`,
    [definitionId, scope ?? '', scheduledFor, rehearsal ? 1 : 0],
  )
  const [run] = await withWaiting(db, rows)
  return run ?? null
}

/**
 * The runs of a definition's occurrences in `[from, to)` for `scopes` (not
 * rehearsals), oldest first: what a backfill answers. At most 5,000 rows.
 */
export async function occurrencesInRange(
  db: Queryable,
  definitionId: number,
  scopes: readonly string[],
  from: Date,
  to: Date,
): Promise<RunListRow[]> {
  if (scopes.length === 0) return []
  const rows = await db.query<Raw>(
    `${SELECT_LIST} WHERE r.definition_id = ? AND r.rehearsal = 0 AND r.scope IN (${placeholders(scopes.length)})
        AND r.scheduled_for >= ? AND r.scheduled_for < ?
      LIMIT 5000`,
    [definitionId, ...scopes, from, to],
  )
  return withWaiting(db, sortRows(rows, 'oldest first'))
}

/** How many runs of a definition are not terminal: the archive pre-check. */
export async function countActiveForDefinition(db: Queryable, definitionId: number): Promise<number> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n FROM event_runs
      WHERE definition_id = ? AND status IN (${placeholders(NON_TERMINAL.length)})`,
    [definitionId, ...NON_TERMINAL],
  )
  return Number(row?.n ?? 0)
}

/** Just this run's status, for a caller that must not act on a stale read. */
export async function statusOf(db: Queryable, id: number): Promise<RunStatus | null> {
  const [row] = await db.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [id])
  return row ? (row.status as RunStatus) : null
}

/** The live fields of many runs in one statement: what subscriptions poll. */
export interface RunStatusSnapshot {
  id: number
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  waitingSteps: number
  updatedAt: Date
}

export async function statusesOf(db: Queryable, ids: readonly number[]): Promise<RunStatusSnapshot[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(
    `SELECT r.id, r.status, r.health, r.current_phase, r.updated_at, ${WAITING_SUBQUERY} AS waiting_steps
       FROM event_runs r WHERE r.id IN (${placeholders(ids.length)})`,
    [...ids],
  )
  return rows.map((row) => ({
    id: Number(row.id),
    status: row.status as RunStatus,
    health: row.health as RunHealth,
    currentPhase: (row.current_phase as string | null) ?? null,
    waitingSteps: Number(row.waiting_steps ?? 0),
    updatedAt: row.updated_at as Date,
  }))
}

/**
 * The run holding `key`, other than `exceptRunId`: what the log names when a run
 * is blocked. A NULL key never contends.
 *
 * Read from the key's lock row, the one {@link claimStart} decides on, joined to
 * its run: a lock row outlives its run's key-holding statuses only until the
 * next claimer takes it over, so the run must still be key-holding to count.
 */
export async function concurrencyHolder(
  db: Queryable,
  key: string | null,
  exceptRunId: number,
): Promise<{ id: number; status: RunStatus; definitionId: number } | null> {
  if (!key) return null
  const [row] = await db.execute<Raw>(
    `SELECT r.id, r.status, r.definition_id
       FROM concurrency_locks l JOIN event_runs r ON r.id = l.run_id
      WHERE l.lock_key = ? AND r.id <> ? AND r.status IN (${placeholders(KEY_HOLDING.length)})`,
    [key, exceptRunId, ...KEY_HOLDING],
  )
  return row
    ? { id: Number(row.id), status: row.status as RunStatus, definitionId: Number(row.definition_id) }
    : null
}

/**
 * The runs holding any of `keys` right now (key-holding statuses), lowest id
 * first: {@link concurrencyHolder} for many keys in one statement, so the API can
 * show a list of runs with their holders without a query per run. Each row
 * carries the key it was asked for (`requestedKey`): keys compare under the
 * column's collation, so the stored spelling may differ from the requested one.
 */
export async function holdersOfKeys(
  db: Queryable,
  keys: readonly string[],
): Promise<{ requestedKey: string; id: number; status: RunStatus; definitionId: number }[]> {
  if (keys.length === 0) return []
  const wanted = keys.map(() => 'SELECT ? AS k').join(' UNION ALL ')
  const rows = await db.query<Raw>(
    `SELECT w.k AS requested_key, r.id, r.status, r.definition_id
       FROM (${wanted}) w
       JOIN concurrency_locks l ON l.lock_key = w.k
       JOIN event_runs r ON r.id = l.run_id
      WHERE r.status IN (${placeholders(KEY_HOLDING.length)})
      ORDER BY r.id`,
    [...keys, ...KEY_HOLDING],
  )
  return rows.map((r) => ({
    requestedKey: String(r.requested_key),
    id: Number(r.id),
    status: r.status as RunStatus,
    definitionId: Number(r.definition_id),
  }))
}

/**
 * Scheduled, not-yet-started runs of a definition at or after `from` that were
 * made by the schedule: what a schedule change re-evaluates.
 */
export async function futureScheduled(
  db: Queryable,
  definitionId: number,
  from: Date,
): Promise<{ id: number; scope: string; scheduledFor: Date }[]> {
  const rows = await db.execute<Raw>(
    `SELECT id, scope, scheduled_for FROM event_runs
      WHERE definition_id = ? AND status = 'scheduled' AND scheduled_for >= ? AND started_by = 'schedule'`,
    [definitionId, from],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    scope: String(r.scope),
    scheduledFor: r.scheduled_for as Date,
  }))
}
