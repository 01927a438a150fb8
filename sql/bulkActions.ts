/**
 * `bulk_actions` and `bulk_action_runs`: one row per bulk action (its id is
 * the `bulkId`), and which runs it applied to, so each run can say which bulk
 * actions touched it.
 */
import type { Queryable } from './db.ts'
import { placeholders, toJson } from './json.ts'

export interface NewBulkAction {
  action: string
  actor: string
  reason: string | null
  filter: unknown
}

/** Record a bulk action before it applies anything; answers its id. */
export async function create(db: Queryable, b: NewBulkAction): Promise<number> {
  const res = await db.run('INSERT INTO bulk_actions (action, actor, reason, filter) VALUES (?, ?, ?, ?)', [
    b.action,
    b.actor,
    b.reason,
    toJson(b.filter) ?? '{}',
  ])
  return res.insertId
}

/** The counts a finished bulk action reached. */
export async function finish(db: Queryable, id: number, matched: number, applied: number): Promise<void> {
  await db.run('UPDATE bulk_actions SET matched = ?, applied = ? WHERE id = ?', [matched, applied, id])
}

/** Note that a bulk action applied to these runs. */
export async function addRuns(db: Queryable, bulkId: number, runIds: readonly number[]): Promise<void> {
  if (runIds.length === 0) return
  await db.runQuery(
    `INSERT IGNORE INTO bulk_action_runs (run_id, bulk_id) VALUES ${runIds.map(() => '(?, ?)').join(', ')}`,
    runIds.flatMap((id) => [id, bulkId]),
  )
}

/** The bulk actions that applied to each of these runs, oldest first. */
export async function ofRuns(db: Queryable, runIds: readonly number[]): Promise<Map<number, number[]>> {
  const out = new Map<number, number[]>()
  if (runIds.length === 0) return out
  const rows = await db.query<Record<string, unknown>>(
    `SELECT run_id, bulk_id FROM bulk_action_runs WHERE run_id IN (${placeholders(runIds.length)}) ORDER BY bulk_id`,
    [...runIds],
  )
  for (const r of rows) {
    const id = Number(r.run_id)
    const list = out.get(id) ?? []
    list.push(Number(r.bulk_id))
    out.set(id, list)
  }
  return out
}
