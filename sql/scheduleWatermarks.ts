/**
 * `schedule_watermarks`: how far each (definition, scope) is materialised.
 * Every occurrence up to a scope's watermark exists as a run; no row means
 * "start from now". A watermark only ever moves forward, and only to an instant
 * whose run was just written, so no occurrence is ever passed over.
 */
import type { Queryable } from './db.ts'
import { placeholders } from './json.ts'

/** Each scope's watermark; scopes without one are absent. */
export async function watermarksOf(db: Queryable, definitionId: number): Promise<Map<string, Date>> {
  const rows = await db.execute<Record<string, unknown>>(
    'SELECT scope, materialized_through FROM schedule_watermarks WHERE definition_id = ?',
    [definitionId],
  )
  return new Map(rows.map((r) => [String(r.scope), r.materialized_through as Date]))
}

/** Move these scopes' watermarks to `through` (never backwards). */
export async function advance(
  db: Queryable,
  definitionId: number,
  scopes: readonly string[],
  through: Date,
): Promise<void> {
  if (scopes.length === 0) return
  await db.runQuery(
    `INSERT INTO schedule_watermarks (definition_id, scope, materialized_through)
     VALUES ${scopes.map(() => `(${placeholders(3)})`).join(', ')}
     ON DUPLICATE KEY UPDATE materialized_through = GREATEST(materialized_through, VALUES(materialized_through))`,
    scopes.flatMap((scope) => [definitionId, scope, through]),
  )
}
