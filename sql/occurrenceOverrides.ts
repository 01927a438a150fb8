/**
 * `occurrence_overrides`: one occurrence (definition, scope, original instant)
 * that a person skipped or moved. The original instant is the occurrence's
 * identity; a second move of it rewrites the row, never adds one.
 */
import type { Queryable } from './db.ts'
import { placeholders } from './json.ts'

export type OverrideStatus = 'skipped' | 'moved'

export interface OverrideRow {
  definitionId: number
  scope: string
  originalAt: Date
  status: OverrideStatus
  movedTo: Date | null
  reason: string | null
  actor: string | null
}

type Raw = Record<string, unknown>

const SELECT_OVERRIDE =
  'SELECT definition_id, scope, original_at, status, moved_to, reason, actor FROM occurrence_overrides'

function hydrate(row: Raw): OverrideRow {
  return {
    definitionId: Number(row.definition_id),
    scope: String(row.scope),
    originalAt: row.original_at as Date,
    status: row.status as OverrideStatus,
    movedTo: (row.moved_to as Date | null) ?? null,
    reason: (row.reason as string | null) ?? null,
    actor: (row.actor as string | null) ?? null,
  }
}

/** The override of one occurrence, read with a row lock when `forUpdate` (inside a transaction). */
export async function get(
  db: Queryable,
  definitionId: number,
  scope: string,
  originalAt: Date,
  forUpdate = false,
): Promise<OverrideRow | null> {
  const [row] = await db.execute<Raw>(
    `${SELECT_OVERRIDE} WHERE definition_id = ? AND scope = ? AND original_at = ?${forUpdate ? ' FOR UPDATE' : ''}`,
    [definitionId, scope, originalAt],
  )
  return row ? hydrate(row) : null
}

/** Write (or rewrite) the override of one occurrence. */
export async function put(db: Queryable, o: OverrideRow): Promise<void> {
  await db.run(
    `INSERT INTO occurrence_overrides (definition_id, scope, original_at, status, moved_to, reason, actor)
     VALUES (?, ?, ?, ?, ?, ?, ?)
     ON DUPLICATE KEY UPDATE status = VALUES(status), moved_to = VALUES(moved_to), reason = VALUES(reason),
       actor = VALUES(actor), updated_at = NOW(3)`,
    [o.definitionId, o.scope, o.originalAt, o.status, o.movedTo, o.reason, o.actor],
  )
}

/**
 * Overrides of these definitions whose original instant or new instant lies in
 * `(after, until]`: what a materialisation pass or an `upcoming` list needs.
 */
export async function inRange(
  db: Queryable,
  definitionIds: readonly number[],
  after: Date,
  until: Date,
): Promise<OverrideRow[]> {
  if (definitionIds.length === 0) return []
  const ids = placeholders(definitionIds.length)
  const rows = await db.query<Raw>(
    `${SELECT_OVERRIDE} WHERE definition_id IN (${ids}) AND original_at > ? AND original_at <= ?
     UNION
     ${SELECT_OVERRIDE} WHERE definition_id IN (${ids}) AND moved_to > ? AND moved_to <= ?`,
    [...definitionIds, after, until, ...definitionIds, after, until],
  )
  return rows.map(hydrate)
}

/** Instants (per scope) that moved occurrences of a definition now occupy, in `(after, until]`. */
export async function movedInto(
  db: Queryable,
  definitionId: number,
  after: Date,
  until: Date,
): Promise<OverrideRow[]> {
  const rows = await db.execute<Raw>(
    `${SELECT_OVERRIDE} WHERE definition_id = ? AND status = 'moved' AND moved_to > ? AND moved_to <= ?`,
    [definitionId, after, until],
  )
  return rows.map(hydrate)
}

/** Forget the override of one occurrence (it is back where its schedule puts it). */
export async function remove(
  db: Queryable,
  definitionId: number,
  scope: string,
  originalAt: Date,
): Promise<void> {
  await db.run('DELETE FROM occurrence_overrides WHERE definition_id = ? AND scope = ? AND original_at = ?', [
    definitionId,
    scope,
    originalAt,
  ])
}

/**
 * Forget overrides whose occurrence lies wholly before `cutoff` (its original
 * instant, and where it was moved to), at most `limit` rows: once their runs
 * are past the history's retention nothing reads them again.
 */
export async function deleteBefore(db: Queryable, cutoff: Date, limit: number): Promise<number> {
  const { affectedRows } = await db.run(
    `DELETE FROM occurrence_overrides
      WHERE original_at < ? AND (moved_to IS NULL OR moved_to < ?) LIMIT ${Math.max(1, Math.floor(limit))}`,
    [cutoff, cutoff],
  )
  return affectedRows
}

/** Another occurrence of the definition and scope already moved to `at`, if any. */
export async function movedTo(
  db: Queryable,
  definitionId: number,
  scope: string,
  at: Date,
): Promise<OverrideRow | null> {
  const [row] = await db.execute<Raw>(
    `${SELECT_OVERRIDE} WHERE definition_id = ? AND moved_to = ? AND scope = ? AND status = 'moved'`,
    [definitionId, at, scope],
  )
  return row ? hydrate(row) : null
}
