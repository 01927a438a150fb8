/** Reading steps: by id, per run, the next step to run, and the cue inbox. */
import type { Queryable, Row, Statement } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import { hydrate, type Raw, SELECT_STEP, type StepRow } from './rows.ts'

export async function getById(db: Queryable, id: number): Promise<StepRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_STEP} WHERE s.id = ?`, [id])
  return row ? hydrate(row) : null
}

/** {@link getById} as a statement for a batch; its rows read by {@link stepOf}. */
export function getByIdStatement(id: number): Statement {
  return { sql: `${SELECT_STEP} WHERE s.id = ?`, params: [id] }
}

/** The step in the answer of {@link getByIdStatement}, or null. */
export function stepOf(rows: readonly Row[]): StepRow | null {
  const [row] = rows as unknown as Raw[]
  return row ? hydrate(row) : null
}

export async function getByIds(db: Queryable, ids: readonly number[]): Promise<StepRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_STEP} WHERE s.id IN (${placeholders(ids.length)})`, [...ids])
  return rows.map(hydrate)
}

/** Every step of a run, in program order. */
export async function listForRun(db: Queryable, runId: number): Promise<StepRow[]> {
  const rows = await db.execute<Raw>(`${SELECT_STEP} WHERE s.run_id = ? ORDER BY s.seq`, [runId])
  return rows.map(hydrate)
}

/** Every step of several runs in one statement, in program order per run. */
export async function listForRuns(db: Queryable, runIds: readonly number[]): Promise<StepRow[]> {
  if (runIds.length === 0) return []
  const rows = await db.query<Raw>(
    `${SELECT_STEP} WHERE s.run_id IN (${placeholders(runIds.length)}) ORDER BY s.run_id, s.seq`,
    [...runIds],
  )
  return rows.map(hydrate)
}

/** The first step of a run that is not done (pending or running), or null when all are. */
export async function nextStep(db: Queryable, runId: number): Promise<StepRow | null> {
  const [row] = await db.execute<Raw>(
    `${SELECT_STEP} WHERE s.run_id = ? AND s.status IN ('pending','running') ORDER BY s.seq LIMIT 1`,
    [runId],
  )
  return row ? hydrate(row) : null
}

/** {@link nextStep} for many runs in one statement. */
export async function nextSteps(db: Queryable, runIds: readonly number[]): Promise<Map<number, StepRow>> {
  const out = new Map<number, StepRow>()
  if (runIds.length === 0) return out
  const rows = await db.query<Raw>(
    `${SELECT_STEP}
       JOIN (SELECT run_id, MIN(seq) AS seq FROM event_run_steps
              WHERE run_id IN (${placeholders(runIds.length)}) AND status IN ('pending','running')
              GROUP BY run_id) n ON n.run_id = s.run_id AND n.seq = s.seq`,
    [...runIds],
  )
  for (const r of rows) {
    const step = hydrate(r)
    out.set(step.runId, step)
  }
  return out
}

/**
 * Steps parked on a person, oldest first (the one waiting longest is most
 * urgent). `waiting_since` is non-NULL exactly for them (migration 0023), so
 * this is a range of its index in its own order.
 */
export async function listWaiting(db: Queryable, limit = 100): Promise<StepRow[]> {
  const n = clampLimit(limit, 100)
  const rows = await db.execute<Raw>(
    `${SELECT_STEP} WHERE s.waiting_since IS NOT NULL ORDER BY s.waiting_since, s.id LIMIT ${n}`,
  )
  return rows.map(hydrate)
}

/** How many steps are parked on a person, and since when the oldest has waited. */
export async function waitingSummary(db: Queryable): Promise<{ count: number; oldestAt: Date | null }> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n, MIN(waiting_since) AS oldest FROM event_run_steps WHERE waiting_since IS NOT NULL`,
  )
  return { count: Number(row?.n ?? 0), oldestAt: (row?.oldest as Date | null) ?? null }
}
