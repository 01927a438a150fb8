/** `event_run_logs`: what happened to a run, who did it, and the retention sweep. */
import { type CountedStatement, type Queryable, runEach, type SqlValue, type Statement } from './db.ts'
import { chunkRows, clampLimit, idSet, parseJson, placeholders, toJson } from './json.ts'

export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

export interface LogRow {
  id: number
  runId: number
  stepId: number | null
  at: Date
  level: LogLevel
  message: string
  actor: string | null
  data: unknown
}

export interface NewLog {
  runId: number
  stepId?: number | null
  level?: LogLevel
  message: string
  actor?: string | null
  data?: unknown
}

type Raw = Record<string, unknown>

function hydrate(row: Raw): LogRow {
  return {
    id: Number(row.id),
    runId: Number(row.run_id),
    stepId: row.step_id == null ? null : Number(row.step_id),
    at: row.at as Date,
    level: row.level as LogLevel,
    message: String(row.message),
    actor: (row.actor as string | null) ?? null,
    data: parseJson<unknown>(row.data, null),
  }
}

function values(l: NewLog): SqlValue[] {
  return [
    l.runId,
    l.stepId ?? null,
    l.level ?? 'info',
    l.message.slice(0, 2000),
    l.actor ?? null,
    toJson(l.data),
  ]
}

export async function append(db: Queryable, entry: NewLog): Promise<void> {
  const st = appendStatement(entry)
  await db.run(st.sql, st.params)
}

/** {@link append} as a statement for a batch. */
export function appendStatement(entry: NewLog): Statement {
  return {
    sql: 'INSERT INTO event_run_logs (run_id, step_id, level, message, actor, data) VALUES (?, ?, ?, ?, ?, ?)',
    params: values(entry),
  }
}

/**
 * Lines of one content (level, message, actor, data) at least this many steps
 * write in one call go in with one `INSERT … SELECT` over those steps' rows,
 * which carries the content once: about half the cost per line of a VALUES
 * row (measured 4–6 against 7.5–9.5 µs per line, 2,500 lines a statement).
 */
const SHARED_LINE_MIN = 8
/** Step ids per set-wise statement, at most. */
const MAX_STEP_IDS_PER_STATEMENT = 2000

/**
 * Several lines (a batch of runs) in a few statements. Each run's lines get
 * ids in the order given: they are written in layers, every run's first line,
 * then every run's second, and so on, so a run's lines never change order
 * whatever the grouping within a layer. Lines a step writes (`stepId` set,
 * belonging to `runId`, as every step's lines do) that many steps share are
 * written set-wise (see {@link SHARED_LINE_MIN}); the rest as multi-row VALUES.
 */
export async function appendMany(db: Queryable, entries: readonly NewLog[]): Promise<void> {
  await runEach(db, appendManyStatements(entries))
}

/** {@link appendMany} as statements for a batch, in order; a shared steps' INSERT says how many lines it must write. */
export function appendManyStatements(entries: readonly NewLog[]): CountedStatement[] {
  return layersByRun(entries).flatMap(layerStatements)
}

/** Split lines so that each run has at most one line per layer, its k-th line in layer k. */
function layersByRun(entries: readonly NewLog[]): NewLog[][] {
  const layers: NewLog[][] = []
  const seen = new Map<number, number>()
  for (const line of entries) {
    const k = seen.get(line.runId) ?? 0
    seen.set(line.runId, k + 1)
    const layer = layers[k]
    if (layer) layer.push(line)
    else layers.push([line])
  }
  return layers
}

/** Lines of distinct runs: shared contents set-wise, the rest as VALUES rows. */
function layerStatements(lines: readonly NewLog[]): CountedStatement[] {
  // Each line's values once: the grouping key and the VALUES row both come from them.
  const rows = lines.map(values)
  const groups = new Map<string, { content: SqlValue[]; stepIds: Set<number>; positions: number[] }>()
  lines.forEach((line, i) => {
    if (line.stepId === undefined || line.stepId === null) return
    const content = (rows[i] as SqlValue[]).slice(2)
    const key = JSON.stringify(content)
    const group = groups.get(key) ?? { content, stepIds: new Set<number>(), positions: [] }
    groups.set(key, group)
    // A step id seen twice would make one row where two are wanted: that line goes as a VALUES row.
    if (group.stepIds.has(line.stepId)) return
    group.stepIds.add(line.stepId)
    group.positions.push(i)
  })
  const out: CountedStatement[] = []
  const written = new Set<number>()
  for (const { content, stepIds, positions } of groups.values()) {
    if (stepIds.size < SHARED_LINE_MIN) continue
    const ids = [...stepIds]
    for (let from = 0; from < ids.length; from += MAX_STEP_IDS_PER_STATEMENT) {
      const some = ids.slice(from, from + MAX_STEP_IDS_PER_STATEMENT)
      const which = idSet('s.id', some)
      // Every step named exists (its line comes from it): anything short is a bug, and fails the caller.
      out.push({
        sql: `INSERT INTO event_run_logs (run_id, step_id, level, message, actor, data)
         SELECT s.run_id, s.id, ?, ?, ?, ? FROM event_run_steps s WHERE ${which.sql} ORDER BY s.id`,
        params: [...content, ...which.args],
        affects: some.length,
        rowsOf: 'log lines of shared steps',
      })
    }
    for (const i of positions) written.add(i)
  }
  const rest = rows.filter((_, i) => !written.has(i))
  const variableBytes = (row: SqlValue[]) => String(row[3]).length + String(row[5]).length
  for (const chunk of chunkRows(rest, variableBytes)) {
    out.push({
      sql: `INSERT INTO event_run_logs (run_id, step_id, level, message, actor, data)
       VALUES ${chunk.map(() => `(${placeholders(6)})`).join(', ')}`,
      params: chunk.flat(),
    })
  }
  return out
}

/** A run's log, newest first, limit clamped to 1..500. */
export async function listForRun(db: Queryable, runId: number, limit = 100): Promise<LogRow[]> {
  const n = clampLimit(limit, 100)
  const rows = await db.execute<Raw>(
    `SELECT id, run_id, step_id, at, level, message, actor, data FROM event_run_logs
      WHERE run_id = ? ORDER BY id DESC LIMIT ${n}`,
    [runId],
  )
  return rows.map(hydrate)
}

/** One log line's place in time, for the retention sweep. */
export interface LogLineAge {
  id: number
  runId: number
  at: Date
}

/**
 * The oldest log lines after line `afterId`, in id order (the order they were
 * written). The retention sweep walks from the oldest line forward and stops at
 * the first line young enough to keep, so it reads the lines it deletes and
 * the few it must keep, never the finished runs whose logs are already gone.
 */
export async function oldestLines(db: Queryable, afterId: number, limit = 1000): Promise<LogLineAge[]> {
  const n = clampLimit(limit, 1000, 1, 5000)
  const rows = await db.execute<Raw>(
    `SELECT id, run_id, at FROM event_run_logs WHERE id > ? ORDER BY id LIMIT ${n}`,
    [afterId],
  )
  return rows.map((r) => ({ id: Number(r.id), runId: Number(r.run_id), at: r.at as Date }))
}

/** Delete the logs of these (terminal) runs; answers how many lines went. */
export async function deleteForRuns(db: Queryable, runIds: readonly number[]): Promise<number> {
  if (runIds.length === 0) return 0
  const res = await db.runQuery(
    `DELETE FROM event_run_logs WHERE run_id IN (${placeholders(runIds.length)})`,
    [...runIds],
  )
  return res.affectedRows
}

/**
 * Delete the lines of these runs that no longer exist. No foreign key refuses
 * a line for a run deleted a moment before (migration 0024: e.g. a held run's
 * note written as its definition is paused); the log retention sweep passes
 * the old lines' runs it did not find ended, so no such line outlives it.
 * Answers how many lines went.
 */
export async function deleteOrphaned(db: Queryable, runIds: readonly number[]): Promise<number> {
  if (runIds.length === 0) return 0
  const res = await db.runQuery(
    `DELETE l FROM event_run_logs l LEFT JOIN event_runs r ON r.id = l.run_id
      WHERE l.run_id IN (${placeholders(runIds.length)}) AND r.id IS NULL`,
    [...runIds],
  )
  return res.affectedRows
}

/**
 * {@link listForRun} for several runs in one statement: each run's newest
 * `limit` lines (clamped to 1..500), newest first per run.
 */
export async function listForRuns(db: Queryable, runIds: readonly number[], limit = 100): Promise<LogRow[]> {
  if (runIds.length === 0) return []
  const n = clampLimit(limit, 100)
  // The lines are chosen by id alone (the window runs over the (run_id, id)
  // index), then joined. Ranking and ordering the full rows made MariaDB carry
  // their JSON `data` through an on-disk temporary table: the shape that failed
  // and once crashed the server on the run list (see sql/eventRuns.ts list).
  const rows = await db.query<Raw>(
    `SELECT l.id, l.run_id, l.step_id, l.at, l.level, l.message, l.actor, l.data
       FROM (SELECT id FROM (
               SELECT id, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY id DESC) AS rn
                 FROM event_run_logs WHERE run_id IN (${placeholders(runIds.length)})) ranked
              WHERE rn <= ${n}) page
       JOIN event_run_logs l ON l.id = page.id`,
    [...runIds],
  )
  // By run, newest first: ids grow with time within a run.
  rows.sort((a, b) => Number(a.run_id) - Number(b.run_id) || Number(b.id) - Number(a.id))
  return rows.map(hydrate)
}
