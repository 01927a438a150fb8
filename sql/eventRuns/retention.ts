/**
 * Run history retention: terminal runs older than the retention period go,
 * with their steps and log lines, a small batch per statement so no statement
 * holds its locks for long (what pg-boss's `deleteAfterDays` does for jobs).
 * Only terminal runs are ever candidates, and every delete is guarded on a
 * terminal status again, so a run that is still moving is never touched.
 */
import type { Queryable } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import { TERMINAL, type TerminalStatus } from '../states.ts'
import { deleteRunChildren } from './children.ts'
import type { Raw } from './rows.ts'

/**
 * Up to `limit` terminal runs that ended before `before`. The scheduled_for
 * bound lets the status index's ranges serve the search (a run ends after it
 * was due, except one cancelled early, which is then kept until its own
 * instant is that old too).
 */
export async function expiredRuns(
  db: Queryable,
  before: Date,
  limit = 200,
): Promise<{ id: number; status: TerminalStatus }[]> {
  const n = clampLimit(limit, 200, 1, 1000)
  const rows = await db.execute<Raw>(
    `SELECT id, status FROM event_runs
      WHERE status IN (${placeholders(TERMINAL.length)}) AND scheduled_for < ?
        AND COALESCE(ended_at, updated_at) < ?
      LIMIT ${n}`,
    [...TERMINAL, before, before],
  )
  return rows.map((r) => ({ id: Number(r.id), status: r.status as TerminalStatus }))
}

/**
 * Delete these terminal runs with their steps (and the steps' ladders and
 * links), log lines and bulk memberships, one short statement per table (and
 * per status for the runs, so the answer is exact per status even when another
 * instance deletes some of them first). Answers how many runs of each status
 * this call deleted.
 */
export async function deleteTerminalRuns(
  db: Queryable,
  runs: readonly { id: number; status: TerminalStatus }[],
): Promise<Partial<Record<TerminalStatus, number>>> {
  const deleted: Partial<Record<TerminalStatus, number>> = {}
  if (runs.length === 0) return deleted
  const ids = runs.map((r) => r.id)
  // Children first, each only for runs that are (still) terminal: no foreign
  // key cascades (migration 0024), and a sweep stopped between statements
  // leaves terminal runs with fewer rows, which the next sweep deletes.
  await deleteRunChildren(db, {
    ids,
    guard: { sql: `r.status IN (${placeholders(TERMINAL.length)})`, args: TERMINAL },
  })
  for (const status of TERMINAL) {
    const mine = runs.filter((r) => r.status === status).map((r) => r.id)
    if (mine.length === 0) continue
    const res = await db.runQuery(
      `DELETE FROM event_runs WHERE id IN (${placeholders(mine.length)}) AND status = ?`,
      [...mine, status],
    )
    if (res.affectedRows > 0) deleted[status] = res.affectedRows
  }
  return deleted
}
