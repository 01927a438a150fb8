/**
 * Counting `event_runs` for health, metrics and retention.
 */

import type { Queryable } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import type { RunStatus } from '../states.ts'
import { NON_TERMINAL, RUN_STATUSES, TERMINAL } from '../states.ts'
import type { Raw } from './rows.ts'

/**
 * Terminal runs that ended before `before`, lowest id first. `withLogsOnly`
 * skips runs whose logs are already gone. It reads every terminal run up to the
 * ones it answers, so it grows with the history: the runner's log retention
 * walks the log lines instead ({@link endedBefore}).
 */
export async function terminalBefore(
  db: Queryable,
  before: Date,
  limit = 500,
  opts: { withLogsOnly?: boolean } = {},
): Promise<number[]> {
  const n = clampLimit(limit, 500, 1, 5000)
  const logsFilter = opts.withLogsOnly
    ? 'AND EXISTS (SELECT 1 FROM event_run_logs l WHERE l.run_id = event_runs.id)'
    : ''
  const rows = await db.execute<Raw>(
    `SELECT id FROM event_runs
      WHERE status IN (${placeholders(TERMINAL.length)}) AND COALESCE(ended_at, updated_at) < ? ${logsFilter}
      ORDER BY id LIMIT ${n}`,
    [...TERMINAL, before],
  )
  return rows.map((r) => Number(r.id))
}

/** Which of `ids` are terminal runs that ended before `before` (the log retention sweep's test). */
export async function endedBefore(db: Queryable, ids: readonly number[], before: Date): Promise<number[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(
    // By id: a range of ended_at would hold every run that ended before the cutoff.
    `SELECT id FROM event_runs FORCE INDEX (PRIMARY)
      WHERE id IN (${placeholders(ids.length)}) AND status IN (${placeholders(TERMINAL.length)}) AND ended_at < ?`,
    [...ids, ...TERMINAL, before],
  )
  return rows.map((r) => Number(r.id))
}

/** Statuses of the runs started and not ended (every non-terminal one but `scheduled`). */
const IN_FLIGHT_OR_PAUSED = NON_TERMINAL.filter((s) => s !== 'scheduled')

/** Run counts per status (every status present, zero when none). */
export async function countByStatus(db: Queryable): Promise<Record<RunStatus, number>> {
  const rows = await db.execute<Raw>('SELECT status, COUNT(*) AS n FROM event_runs GROUP BY status')
  const out = Object.fromEntries(RUN_STATUSES.map((status) => [status, 0])) as Record<RunStatus, number>
  for (const r of rows) out[r.status as RunStatus] = Number(r.n)
  return out
}

/**
 * How many runs that have not ended are degraded. Only a failed attempt of a
 * step degrades a run, and only a started run has steps, so they are all in
 * flight or paused: this reads those ranges of idx_evrun_due and checks
 * `health` on each row (migration 0031; an index of its own cost every new
 * run an entry). What it reads grows with the runs in flight, and is nothing
 * when none is.
 */
export async function countDegraded(db: Queryable): Promise<number> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n FROM event_runs FORCE INDEX (idx_evrun_due)
      WHERE status IN (${placeholders(IN_FLIGHT_OR_PAUSED.length)}) AND health = 'degraded'`,
    [...IN_FLIGHT_OR_PAUSED],
  )
  return Number(row?.n ?? 0)
}

/*
 * Runs by status without counting the history on every call.
 *
 * Terminal runs never change status again and each carries `ended_at`, stamped
 * once; new runs take ever higher ids. So the counts split at two marks, kept
 * by the caller: terminal runs that ended at or before `endedThrough`, and all
 * runs with id at or below `idThrough`, are counted once (a "base"); each call
 * counts only what is past the marks (an index range each: runs ended since,
 * runs made since) plus the runs in flight. Scheduled runs are what is left:
 * every run is scheduled, in flight or terminal. The marks trail the database
 * clock by a lag longer than any transaction that writes runs, so nothing
 * commits behind a mark after it was taken.
 */

/** Where the base stops (see above). */
export interface RunCountMarks {
  endedThrough: Date
  idThrough: number
}

/** Counts up to the marks. */
export interface RunCountBase {
  marks: RunCountMarks
  /** Runs with id <= idThrough. */
  total: number
  /** Terminal runs by status that ended at or before endedThrough. */
  terminal: Record<(typeof TERMINAL)[number], number>
}

/** What a call counts past the marks, and the runs in flight. */
export interface RunCountRecent {
  /** Runs with id > idThrough. */
  total: number
  /** Terminal runs by status that ended after endedThrough. */
  terminal: Record<(typeof TERMINAL)[number], number>
  /** Runs starting, running, paused or ending. */
  inFlight: Record<(typeof IN_FLIGHT_OR_PAUSED)[number], number>
}

/**
 * Runs that ended after a mark (two parameters, the mark twice). There is no
 * index of `ended_at` (migration 0028: the start of every run rewrote it), so
 * this reads the range `updated_at > mark` of idx_evrun_updated and checks
 * `ended_at` on each row: the statement that stamps `ended_at` stamps
 * `updated_at` with the same NOW(3), and nothing sets `updated_at` back, so
 * every run that ended after the mark is in the range. The range also holds
 * the runs made or moved since the mark, which are read and not counted.
 */
const ENDED_SINCE = 'updated_at > ? AND ended_at > ?'

function zeros<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>
}

async function markAt(db: Queryable, lagSeconds: number): Promise<Date> {
  const [row] = await db.query<Raw>('SELECT NOW(3) - INTERVAL ? SECOND AS mark', [lagSeconds])
  return row?.mark as Date
}

/**
 * Count everything once, up to marks `lagSeconds` behind the database clock.
 * Reads the whole table: a caller does it once, then moves the marks with
 * {@link advanceRunCountBase}. Run it in one transaction (one snapshot).
 */
export async function countRunBase(db: Queryable, lagSeconds: number): Promise<RunCountBase> {
  const endedThrough = await markAt(db, lagSeconds)
  const [hw] = await db.execute<Raw>(
    'SELECT COALESCE(MAX(id), 0) AS id FROM event_runs WHERE created_at < ?',
    [endedThrough],
  )
  const idThrough = Number(hw?.id ?? 0)
  const rows = await db.execute<Raw>(
    `SELECT status, SUM(id <= ?) AS total, SUM(ended_at <= ?) AS ended FROM event_runs GROUP BY status`,
    [idThrough, endedThrough],
  )
  const terminal = zeros(TERMINAL)
  let total = 0
  for (const r of rows) {
    total += Number(r.total ?? 0)
    if ((TERMINAL as readonly string[]).includes(String(r.status)))
      terminal[r.status as (typeof TERMINAL)[number]] = Number(r.ended ?? 0)
  }
  return { marks: { endedThrough, idThrough }, total, terminal }
}

/** Move a base's marks to `lagSeconds` behind the database clock, counting only what lies between. */
export async function advanceRunCountBase(
  db: Queryable,
  base: RunCountBase,
  lagSeconds: number,
): Promise<RunCountBase> {
  const endedThrough = await markAt(db, lagSeconds)
  const { marks } = base
  if (endedThrough.getTime() <= marks.endedThrough.getTime()) return base
  const ended = await db.execute<Raw>(
    `SELECT status, COUNT(*) AS n FROM event_runs FORCE INDEX (idx_evrun_updated)
      WHERE ${ENDED_SINCE} AND ended_at <= ? AND status IN (${placeholders(TERMINAL.length)})
      GROUP BY status`,
    [marks.endedThrough, marks.endedThrough, endedThrough, ...TERMINAL],
  )
  const terminal = { ...base.terminal }
  for (const r of ended) terminal[r.status as (typeof TERMINAL)[number]] += Number(r.n)
  const [made] = await db.execute<Raw>(
    `SELECT COALESCE(MAX(id), ?) AS id FROM event_runs WHERE id > ? AND created_at < ?`,
    [marks.idThrough, marks.idThrough, endedThrough],
  )
  const idThrough = Number(made?.id ?? marks.idThrough)
  const [between] = await db.execute<Raw>('SELECT COUNT(*) AS n FROM event_runs WHERE id > ? AND id <= ?', [
    marks.idThrough,
    idThrough,
  ])
  return {
    marks: { endedThrough, idThrough },
    total: base.total + Number(between?.n ?? 0),
    terminal,
  }
}

/** Count what lies past the marks, and the runs in flight: three index ranges. */
export async function countRunsRecent(db: Queryable, marks: RunCountMarks): Promise<RunCountRecent> {
  const [made] = await db.execute<Raw>('SELECT COUNT(*) AS n FROM event_runs WHERE id > ?', [marks.idThrough])
  const ended = await db.execute<Raw>(
    `SELECT status, COUNT(*) AS n FROM event_runs FORCE INDEX (idx_evrun_updated)
      WHERE ${ENDED_SINCE} AND status IN (${placeholders(TERMINAL.length)})
      GROUP BY status`,
    [marks.endedThrough, marks.endedThrough, ...TERMINAL],
  )
  const live = await db.execute<Raw>(
    `SELECT status, COUNT(*) AS n FROM event_runs
      WHERE status IN (${placeholders(IN_FLIGHT_OR_PAUSED.length)}) GROUP BY status`,
    [...IN_FLIGHT_OR_PAUSED],
  )
  const terminal = zeros(TERMINAL)
  for (const r of ended) terminal[r.status as (typeof TERMINAL)[number]] = Number(r.n)
  const inFlight = zeros(IN_FLIGHT_OR_PAUSED)
  for (const r of live) inFlight[r.status as (typeof IN_FLIGHT_OR_PAUSED)[number]] = Number(r.n)
  return { total: Number(made?.n ?? 0), terminal, inFlight }
}
