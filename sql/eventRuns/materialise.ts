/**
 * Making runs: one occurrence of a definition per scope becomes one row.
 *
 * The UNIQUE key (definition_id, scope, scheduled_for) makes "one run per
 * occurrence per scope" true whoever inserts; inserting an occurrence again
 * writes nothing and answers "already existed", which is not an error.
 */
import type { Queryable, SqlValue } from '../db.ts'
import { placeholders, toJson } from '../json.ts'
import { deleteRunChildren } from './children.ts'
import { STARTS_UNDER_ROW_LOCK } from './rows.ts'

/** What {@link materialise} needs to insert one occurrence. */
export interface NewRun {
  definitionId: number
  versionId: number
  scope: string
  scheduledFor: Date
  timezone: string
  concurrencyKey: string | null
  params?: Record<string, unknown> | null
  rehearsal?: boolean
  startedBy?: string | null
  /** The overlap policy the run starts under; null/omitted = allow_all (the set-wise start path). */
  overlap?: 'skip' | 'buffer_one' | 'cancel_other' | null
  /** True for a backfilled run: started however late, never missed for lateness. */
  graceExempt?: boolean
}

/** The run's values for {@link RUN_VALUE_COLUMNS}, then the instant its grace counts from. */
function newRunValues(run: NewRun): SqlValue[] {
  // A rehearsal never carries a key or an overlap policy.
  const concurrencyKey = run.rehearsal ? null : run.concurrencyKey
  const overlap = run.rehearsal ? null : (run.overlap ?? null)
  return [
    run.definitionId,
    run.versionId,
    run.scope ?? '',
    run.scheduledFor,
    run.timezone || 'UTC',
    concurrencyKey,
    toJson(run.params),
    run.rehearsal ? 1 : 0,
    run.startedBy ?? null,
    // wake_at, by STARTS_UNDER_ROW_LOCK's rule on the values stored: a key-less
    // run is due at its scheduled_for, found there by the start (idx_evrun_due);
    // only runs started by their own claim (a key, an overlap policy) wait in
    // idx_evrun_wake, where a held key defers them.
    concurrencyKey === null && overlap === null ? null : run.scheduledFor,
    overlap,
    run.graceExempt ? 1 : 0,
    // missed_at: NULL for a grace-exempt run (NULL + INTERVAL is NULL), so the sweep never sees it.
    run.graceExempt ? null : run.scheduledFor,
  ]
}

/** The columns a new run is given as values, in {@link newRunValues}' order; `missed_at` follows, from the grace. */
const RUN_VALUE_COLUMNS = [
  'definition_id',
  'version_id',
  'scope',
  'scheduled_for',
  'timezone',
  'concurrency_key',
  'params',
  'rehearsal',
  'started_by',
  'wake_at',
  'overlap',
  'grace_exempt',
] as const

const INSERT_RUN_COLUMNS = `(${RUN_VALUE_COLUMNS.join(', ')}, missed_at)`

// The instant the run becomes missed, from its definition's grace as stored
// when the row is written: a grace change re-stamps the scheduled runs
// (resetMissedAt), and the statement that writes the run reads the value that
// change committed, so a run made at the same moment never keeps the old one.
const MISSED_AT = '? + INTERVAL (SELECT d.grace_seconds FROM event_definitions d WHERE d.id = ?) SECOND'
const ROW_SQL = `(${placeholders(RUN_VALUE_COLUMNS.length)}, ${MISSED_AT})`

// Many runs are written as rows of a derived table joined to their
// definitions, so the grace is read once per definition rather than by a
// subquery per row: in statements of 1,000 runs the subqueries were about two
// thirds of MariaDB's CPU for the INSERT (68-70 against 22-23 µs a run,
// docs/performance.md). It is still a locking read of the committed grace.
// `seq` keeps the runs' ids in the order they were given.
const MANY_FIELDS = [...RUN_VALUE_COLUMNS, 'missed_from', 'seq'] as const
const MANY_FIRST_ROW = `SELECT ${MANY_FIELDS.map((f) => `? AS ${f}`).join(', ')}`
const MANY_NEXT_ROW = `SELECT ${placeholders(MANY_FIELDS.length)}`
const MANY_COLUMNS = `${RUN_VALUE_COLUMNS.map((f) => `v.${f}`).join(', ')}, v.missed_from + INTERVAL d.grace_seconds SECOND`

/**
 * Materialise one occurrence: the new run's id, or `null` when the occurrence
 * already existed. "Already existed" is the ordinary answer under a tick that
 * overran into the next one, not an error. A rehearsal never carries a key.
 */
export async function materialise(db: Queryable, run: NewRun): Promise<number | null> {
  const res = await db.run(`INSERT IGNORE INTO event_runs ${INSERT_RUN_COLUMNS} VALUES ${ROW_SQL}`, [
    ...newRunValues(run),
    run.definitionId,
  ])
  return res.affectedRows === 1 ? res.insertId : null
}

/** Materialise many occurrences in one statement; answers how many were new. */
export async function materialiseMany(db: Queryable, runs: readonly NewRun[]): Promise<number> {
  if (runs.length === 0) return 0
  const rows = runs.map((_, i) => (i === 0 ? MANY_FIRST_ROW : MANY_NEXT_ROW)).join(' UNION ALL ')
  const res = await db.runQuery(
    `INSERT IGNORE INTO event_runs ${INSERT_RUN_COLUMNS}
     SELECT ${MANY_COLUMNS}
       FROM (${rows}) v JOIN event_definitions d ON d.id = v.definition_id
      ORDER BY v.seq`,
    runs.flatMap((run, i) => [...newRunValues(run), i]),
  )
  return res.affectedRows
}

/**
 * Re-stamp when a definition's scheduled runs become missed, from its grace as
 * stored now: called after the grace changed (a rare, operator's write). It
 * walks the scheduled runs of idx_evrun_due, every definition's runs waiting
 * to start and none of the history, and rewrites this definition's.
 */
export async function resetMissedAt(db: Queryable, definitionId: number): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs FORCE INDEX (idx_evrun_due)
        SET missed_at = scheduled_for + INTERVAL (SELECT d.grace_seconds FROM event_definitions d WHERE d.id = ?) SECOND
      WHERE status = 'scheduled' AND missed_at IS NOT NULL AND definition_id = ?`,
    [definitionId, definitionId],
  )
  return res.affectedRows
}

/**
 * Withdraw never-started runs (delete them: a run the schedule made and
 * nothing started is a projection, not history), their log lines first (a
 * run held by a concurrency key logs why; no foreign key cascades, migration
 * 0024). Guarded on `scheduled`, so a run that started meanwhile stays; inside
 * a transaction the guard's read of the runs holds them until it commits.
 * Answers how many went.
 */
export async function withdrawScheduled(db: Queryable, ids: readonly number[]): Promise<number> {
  if (ids.length === 0) return 0
  await deleteRunChildren(db, { ids, guard: { sql: "r.status = 'scheduled'", args: [] } })
  const res = await db.runQuery(
    `DELETE FROM event_runs WHERE id IN (${placeholders(ids.length)}) AND status = 'scheduled'`,
    [...ids],
  )
  return res.affectedRows
}

/**
 * Move a never-started run to another instant (its due time and the instant it
 * becomes missed move with it), with the key its template gives there.
 * Answers false when it is no longer `scheduled`. A run already at `to` in the
 * same scope surfaces as DB_ERRNO.DUP_ENTRY for the caller to map.
 */
export async function moveScheduled(
  db: Queryable,
  id: number,
  to: Date,
  concurrencyKey: string | null,
): Promise<boolean> {
  // `wake_at` after the key: MariaDB assigns a single-table UPDATE's columns
  // left to right, so STARTS_UNDER_ROW_LOCK reads the run's new key.
  const res = await db.run(
    `UPDATE event_runs r SET r.scheduled_for = ?, r.concurrency_key = ?,
        r.wake_at = IF(${STARTS_UNDER_ROW_LOCK}, NULL, ?),
        r.missed_at = IF(r.grace_exempt = 1, NULL,
          ? + INTERVAL (SELECT d.grace_seconds FROM event_definitions d WHERE d.id = r.definition_id) SECOND)
      WHERE r.id = ? AND r.status = 'scheduled'`,
    [to, concurrencyKey, to, to, id],
  )
  return res.affectedRows === 1
}
