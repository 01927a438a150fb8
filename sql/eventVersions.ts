/**
 * `event_versions`: immutable programs. A run pins the version current when it
 * was materialised, so publishing never changes a run already made.
 */
import type { Db, Queryable } from './db.ts'
import { create as createDefinitionRow, type NewDefinition } from './eventDefinitions.ts'
import { parseJson, placeholders, toJson } from './json.ts'

export interface VersionRow {
  id: number
  definitionId: number
  version: number
  program: unknown
  createdBy: string | null
  createdAt: Date
}

type Raw = Record<string, unknown>

const SELECT_VERSION =
  'SELECT id, definition_id, version, program, created_by, created_at FROM event_versions'

function hydrate(row: Raw): VersionRow {
  return {
    id: Number(row.id),
    definitionId: Number(row.definition_id),
    version: Number(row.version),
    program: parseJson<unknown>(row.program, null),
    createdBy: (row.created_by as string | null) ?? null,
    createdAt: row.created_at as Date,
  }
}

/**
 * Publish a program as the definition's next version and make it current, in one
 * short transaction; the definition row is locked so two publishers number their
 * versions one after the other (on a Galera cluster, where the lock holds only
 * on its node, the two writes to that row conflict at COMMIT instead and the
 * loser runs again, numbering after the winner). Answers the new version.
 */
export function publish(
  db: Db,
  definitionId: number,
  program: unknown,
  createdBy: string | null,
): Promise<VersionRow> {
  return db.transaction((tx) => publishIn(tx, definitionId, program, createdBy), { retryable: true })
}

/** {@link publish} inside the caller's transaction (a new definition and its version 1 commit together). */
export async function publishIn(
  tx: Queryable,
  definitionId: number,
  program: unknown,
  createdBy: string | null,
): Promise<VersionRow> {
  await tx.execute('SELECT id FROM event_definitions WHERE id = ? FOR UPDATE', [definitionId])
  const [max] = await tx.execute<Raw>(
    'SELECT COALESCE(MAX(version), 0) AS v FROM event_versions WHERE definition_id = ?',
    [definitionId],
  )
  const version = Number(max?.v ?? 0) + 1
  const res = await tx.run(
    'INSERT INTO event_versions (definition_id, version, program, created_by) VALUES (?, ?, ?, ?)',
    [definitionId, version, toJson(program), createdBy],
  )
  await tx.run('UPDATE event_definitions SET current_version_id = ? WHERE id = ?', [
    res.insertId,
    definitionId,
  ])
  const [row] = await tx.execute<Raw>(`${SELECT_VERSION} WHERE id = ?`, [res.insertId])
  return hydrate(row as Raw)
}

/**
 * Create a definition and publish its version 1 in one transaction: either
 * both rows exist or neither does (a definition without a version could never
 * run and would hold its slug). Answers the definition's id.
 */
export function createWithFirstVersion(
  db: Db,
  def: NewDefinition,
  program: unknown,
  createdBy: string | null,
): Promise<number> {
  // Safe to repeat: a losing attempt (a certification conflict on a cluster)
  // left nothing, and a slug taken meanwhile answers the duplicate key.
  return db.transaction(
    async (tx) => {
      const id = await createDefinitionRow(tx, def)
      await publishIn(tx, id, program, createdBy)
      return id
    },
    { retryable: true },
  )
}

export async function getById(db: Queryable, id: number): Promise<VersionRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_VERSION} WHERE id = ?`, [id])
  return row ? hydrate(row) : null
}

export async function getByIds(db: Queryable, ids: readonly number[]): Promise<VersionRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_VERSION} WHERE id IN (${placeholders(ids.length)})`, [...ids])
  return rows.map(hydrate)
}

/** Every version of several definitions, newest first per definition. */
export async function listForDefinitions(
  db: Queryable,
  definitionIds: readonly number[],
): Promise<VersionRow[]> {
  if (definitionIds.length === 0) return []
  const rows = await db.query<Raw>(
    `${SELECT_VERSION} WHERE definition_id IN (${placeholders(definitionIds.length)}) ORDER BY definition_id, version DESC`,
    [...definitionIds],
  )
  return rows.map(hydrate)
}
