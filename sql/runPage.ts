/**
 * The run reads behind user interfaces: the paged, filtered run list (keyset
 * pagination, newest first) and the change feed's "which runs changed since T".
 *
 * Both are index range reads whose cost follows the rows answered, never the
 * rows stored (sql/migrations/0007_run_page_indexes.sql):
 *
 * - A page walks ONE index in (scheduled_for DESC, id DESC) order, starting
 *   strictly after the cursor, and stops after `limit` rows. No OFFSET: page
 *   1000 reads what page 1 reads, and rows inserted meanwhile never shift the
 *   pages after a cursor. The index is chosen here (FORCE INDEX) from the
 *   filter, so the plan does not depend on statistics; filters the chosen index
 *   does not cover are checked on the rows it yields.
 * - Several statuses are one branch per status, each a range of
 *   (status, scheduled_for) taking at most `limit` rows, merged and cut to
 *   `limit`: at most 9 × `limit` index entries, however many runs each status
 *   has (one range over `status IN (...)` would have to sort them all). A
 *   definition's runs with no status asked are every status's branch of
 *   (definition_id, status, scheduled_for): an index in list order by
 *   definition alone cost every new run an entry (migration 0021). A page of
 *   every run is likewise the rehearsals' range and the other runs' of
 *   (rehearsal, scheduled_for), merged (migration 0022).
 */

import type { Queryable, SqlValue } from './db.ts'
import { getByIds, type RunListRow } from './eventRuns/index.ts'
import { clampLimit, placeholders } from './json.ts'
import { RUN_STATUSES, type RunHealth, type RunStatus } from './states.ts'

/** What a page may be narrowed to; null or absent = no condition. */
export interface RunPageFilter {
  definitionId?: number | null
  /** Any of these statuses; an empty list matches no run. */
  statuses?: readonly RunStatus[] | null
  scope?: string | null
  /** scheduled_for ≥ this (inclusive). */
  scheduledAfter?: Date | null
  /** scheduled_for < this (exclusive). */
  scheduledBefore?: Date | null
  rehearsal?: boolean | null
}

/** A position in the list: the last run of the previous page. */
export interface RunPageKey {
  scheduledFor: Date
  id: number
}

/** Largest page. */
export const MAX_PAGE_SIZE = 500

type Raw = Record<string, unknown>

/** The index a page walks, and the equality conditions it serves (the rest are checked on its rows). */
function plan(filter: RunPageFilter, status: RunStatus | null): { index: string; served: Set<string> } {
  if (status !== null) {
    return filter.definitionId != null
      ? { index: 'idx_evrun_definition_status_list', served: new Set(['definitionId', 'status']) }
      : { index: 'idx_evrun_due', served: new Set(['status']) }
  }
  if (filter.scope != null) return { index: 'idx_evrun_scope_list', served: new Set(['scope']) }
  // With neither, pageKeys asks for each value of `rehearsal` in turn.
  return { index: 'idx_evrun_rehearsal_list', served: new Set(['rehearsal']) }
}

/** One branch: a range of one index in list order, after `after`, at most `limit` keys. */
function branch(
  filter: RunPageFilter,
  status: RunStatus | null,
  after: RunPageKey | null,
  limit: number,
): { sql: string; args: SqlValue[] } {
  const { index } = plan(filter, status)
  // Every condition is written out, served by the index or not: the optimizer
  // turns the served ones into the range and filters with the others.
  const where: string[] = []
  const args: SqlValue[] = []
  if (filter.definitionId != null) {
    where.push('r.definition_id = ?')
    args.push(filter.definitionId)
  }
  if (status !== null) {
    where.push('r.status = ?')
    args.push(status)
  }
  if (filter.scope != null) {
    where.push('r.scope = ?')
    args.push(filter.scope)
  }
  if (filter.rehearsal != null) {
    where.push('r.rehearsal = ?')
    args.push(filter.rehearsal ? 1 : 0)
  }
  if (filter.scheduledAfter != null) {
    where.push('r.scheduled_for >= ?')
    args.push(filter.scheduledAfter)
  }
  if (filter.scheduledBefore != null) {
    where.push('r.scheduled_for < ?')
    args.push(filter.scheduledBefore)
  }
  if (after !== null) {
    // Strictly after the cursor in (scheduled_for DESC, id DESC) order. Spelled
    // as an OR rather than a row comparison: MariaDB makes ranges of this form.
    where.push('(r.scheduled_for < ? OR (r.scheduled_for = ? AND r.id < ?))')
    args.push(after.scheduledFor, after.scheduledFor, after.id)
  }
  const clause = where.length ? `WHERE ${where.join(' AND ')}` : ''
  return {
    sql: `SELECT r.id, r.scheduled_for FROM event_runs r FORCE INDEX (${index}) ${clause}
           ORDER BY r.scheduled_for DESC, r.id DESC LIMIT ${clampLimit(limit, 1, 1, MAX_PAGE_SIZE + 1)}`,
    args,
  }
}

function keyOf(row: Raw): RunPageKey {
  return { id: Number(row.id), scheduledFor: row.scheduled_for as Date }
}

function newestFirst(a: RunPageKey, b: RunPageKey): number {
  return b.scheduledFor.getTime() - a.scheduledFor.getTime() || b.id - a.id
}

/**
 * The keys of up to `limit` runs matching `filter`, newest first, strictly
 * after `after` (null = from the newest). One statement.
 */
export async function pageKeys(
  db: Queryable,
  filter: RunPageFilter,
  limit: number,
  after: RunPageKey | null,
): Promise<RunPageKey[]> {
  const n = clampLimit(limit, 1, 1, MAX_PAGE_SIZE + 1)
  const asked = filter.statuses == null ? null : [...new Set(filter.statuses)]
  if (asked !== null && asked.length === 0) return []
  // A definition's runs are a range of (definition_id, status, scheduled_for)
  // per status: no index keeps them in list order by definition alone
  // (migration 0021), so every status is a branch of its own.
  const statuses = asked === null && filter.definitionId != null ? [...RUN_STATUSES] : asked
  let parts: { sql: string; args: SqlValue[] }[]
  if (statuses !== null) parts = statuses.map((status) => branch(filter, status, after, n))
  else if (filter.scope == null && filter.rehearsal == null)
    // Every run: the rehearsals' range of (rehearsal, scheduled_for) and the
    // rest's, merged. An index of every run in list order cost each new run
    // an entry for this read alone (migration 0022).
    parts = [false, true].map((rehearsal) => branch({ ...filter, rehearsal }, null, after, n))
  else parts = [branch(filter, null, after, n)]
  if (parts.length === 1) {
    const [{ sql, args }] = parts as [{ sql: string; args: SqlValue[] }]
    return (await db.query<Raw>(sql, args)).map(keyOf)
  }
  const rows = await db.query<Raw>(
    `SELECT id, scheduled_for FROM (${parts.map((p) => `(${p.sql})`).join(' UNION ALL ')}) merged
      ORDER BY scheduled_for DESC, id DESC LIMIT ${n}`,
    parts.flatMap((p) => p.args),
  )
  // The merge's order is SQL's; sorted again here so no engine detail decides it.
  return rows.map(keyOf).sort(newestFirst)
}

/** One page: the runs (newest first) and whether more follow. */
export interface RunPageResult {
  runs: RunListRow[]
  hasNextPage: boolean
}

/**
 * A page of `first` runs (clamped to 1..500) after `after`: the keys from one
 * index range (one more than asked, to know whether a next page exists), then
 * those runs by primary key.
 */
export async function runPage(
  db: Queryable,
  filter: RunPageFilter,
  first: number,
  after: RunPageKey | null,
): Promise<RunPageResult> {
  const n = clampLimit(first, 50, 1, MAX_PAGE_SIZE)
  const keys = await pageKeys(db, filter, n + 1, after)
  const hasNextPage = keys.length > n
  const page = keys.slice(0, n)
  if (page.length === 0) return { runs: [], hasNextPage: false }
  const byId = new Map(
    (
      await getByIds(
        db,
        page.map((k) => k.id),
      )
    ).map((r) => [r.id, r]),
  )
  // A run deleted between the two reads (retention) is simply left out.
  const runs: RunListRow[] = []
  for (const k of page) {
    const run = byId.get(k.id)
    if (run) runs.push(run)
  }
  return { runs, hasNextPage }
}

/** Filters of the `runs` query ({@link listRuns}). */
export interface ListRunsOptions {
  definitionId?: number | null
  status?: RunStatus | null
  /** Clamped to 1..500. @default 100 */
  limit?: number
}

/**
 * The `runs` query (the admin run list): newest occurrence first
 * (`scheduled_for DESC, id DESC`), the first page of {@link runPage}, so it
 * walks the same index ranges (no index of its own to keep in order).
 */
export async function listRuns(db: Queryable, opts: ListRunsOptions = {}): Promise<RunListRow[]> {
  const n = clampLimit(opts.limit ?? 100, 100)
  const filter: RunPageFilter = {
    definitionId: opts.definitionId ?? null,
    statuses: opts.status != null ? [opts.status] : null,
  }
  return (await runPage(db, filter, n, null)).runs
}

// ---------------------------------------------------------------------------
// The change feed

/** A run's live fields and the fields a feed filter looks at. */
export interface RunChangeRow {
  id: number
  definitionId: number
  scope: string
  scheduledFor: Date
  rehearsal: boolean
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  /** Steps parked on a person. */
  waitingSteps: number
  updatedAt: Date
}

// The parked-step count is per changed row, by the (run_id, seq) key: a few
// index entries per run, and only for runs that changed. Forced, because on few
// steps the optimizer prefers the waiting-steps index, which reads the whole
// inbox for every changed run.
const CHANGE_COLUMNS = `r.id, r.definition_id, r.scope, r.scheduled_for, r.rehearsal, r.status, r.health,
  r.current_phase, r.updated_at,
  (SELECT COUNT(*) FROM event_run_steps s FORCE INDEX (uq_evstep_run_seq)
    WHERE s.run_id = r.id AND s.status = 'running' AND s.parked = 1) AS waiting_steps`

function hydrateChange(row: Raw): RunChangeRow {
  return {
    id: Number(row.id),
    definitionId: Number(row.definition_id),
    scope: String(row.scope ?? ''),
    scheduledFor: row.scheduled_for as Date,
    rehearsal: Boolean(Number(row.rehearsal)),
    status: row.status as RunStatus,
    health: row.health as RunHealth,
    currentPhase: (row.current_phase as string | null) ?? null,
    waitingSteps: Number(row.waiting_steps ?? 0),
    updatedAt: row.updated_at as Date,
  }
}

/**
 * Runs whose `updated_at` is at or after `from`, oldest change first, after
 * the position (`after`) where a previous full read stopped; at most `limit`.
 * A range of idx_evrun_updated read in its own order: no sort, no scan.
 */
export async function changedSince(
  db: Queryable,
  from: Date,
  after: { updatedAt: Date; id: number } | null,
  limit: number,
): Promise<RunChangeRow[]> {
  const n = clampLimit(limit, 1000, 1, 5000)
  const args: SqlValue[] = [from]
  let keyset = ''
  if (after !== null) {
    keyset = 'AND (r.updated_at > ? OR (r.updated_at = ? AND r.id > ?))'
    args.push(after.updatedAt, after.updatedAt, after.id)
  }
  const rows = await db.query<Raw>(
    `SELECT ${CHANGE_COLUMNS} FROM event_runs r FORCE INDEX (idx_evrun_updated)
      WHERE r.updated_at >= ? ${keyset}
      ORDER BY r.updated_at, r.id LIMIT ${n}`,
    args,
  )
  return rows.map(hydrateChange)
}

/** Runs in progress a baseline remembers, at most (beyond it, a later change of one may be reported once more). */
const BASELINE_LIMIT = 20_000

/**
 * Where a change feed starts: the runs in progress (starting, running, paused,
 * ending: the ones whose later changes matter most) and the runs changed within
 * `windowMs` of the newest change, each as it is now. Two index range reads.
 */
export async function changeBaseline(db: Queryable, windowMs: number): Promise<RunChangeRow[]> {
  const live = ['starting', 'running', 'paused', 'ending']
  const inProgress = await db.query<Raw>(
    `SELECT ${CHANGE_COLUMNS} FROM event_runs r FORCE INDEX (idx_evrun_due)
      WHERE r.status IN (${placeholders(live.length)}) LIMIT ${BASELINE_LIMIT}`,
    live,
  )
  const latest = await db.query<Raw>(
    `SELECT ${CHANGE_COLUMNS} FROM event_runs r FORCE INDEX (idx_evrun_updated)
      WHERE r.updated_at >= (SELECT MAX(updated_at) FROM event_runs) - INTERVAL ? MICROSECOND`,
    [Math.max(0, Math.trunc(windowMs)) * 1000],
  )
  return [...inProgress, ...latest].map(hydrateChange)
}
