/**
 * `event_definitions`: what an event is and when it happens. The slug is
 * immutable; the program lives in `event_versions` and the definition points at
 * its current version.
 */

import type { Db, Queryable, SqlValue } from './db.ts'
import { parseJson, placeholders, toJson } from './json.ts'
import type { DefinitionState } from './states.ts'
import { NON_TERMINAL } from './states.ts'

export interface DefinitionRow {
  id: number
  slug: string
  title: string
  description: string | null
  schedule: string | null
  timezone: string
  graceSeconds: number
  concurrencyKey: string | null
  scopes: string[]
  state: DefinitionState
  currentVersionId: number | null
  materializedThrough: Date | null
  createdAt: Date
  updatedAt: Date
}

type Raw = Record<string, unknown>

const SELECT_DEF = `SELECT id, slug, title, description, schedule, timezone, grace_seconds, concurrency_key, scopes,
  state, current_version_id, materialized_through, created_at, updated_at FROM event_definitions`

function hydrate(row: Raw): DefinitionRow {
  return {
    id: Number(row.id),
    slug: String(row.slug),
    title: String(row.title),
    description: (row.description as string | null) ?? null,
    schedule: (row.schedule as string | null) ?? null,
    timezone: String(row.timezone),
    graceSeconds: Number(row.grace_seconds),
    concurrencyKey: (row.concurrency_key as string | null) ?? null,
    scopes: parseJson<string[]>(row.scopes, ['']),
    state: row.state as DefinitionState,
    currentVersionId: row.current_version_id == null ? null : Number(row.current_version_id),
    materializedThrough: (row.materialized_through as Date | null) ?? null,
    createdAt: row.created_at as Date,
    updatedAt: row.updated_at as Date,
  }
}

export interface NewDefinition {
  slug: string
  title: string
  description?: string | null
  schedule?: string | null
  timezone: string
  graceSeconds: number
  concurrencyKey?: string | null
  scopes: string[]
  state: DefinitionState
}

/** Insert a definition; a duplicate slug surfaces as DB_ERRNO.DUP_ENTRY for the caller to map. */
export async function create(db: Queryable, def: NewDefinition): Promise<number> {
  const res = await db.run(
    `INSERT INTO event_definitions (slug, title, description, schedule, timezone, grace_seconds, concurrency_key, scopes, state)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [
      def.slug,
      def.title,
      def.description ?? null,
      def.schedule ?? null,
      def.timezone,
      def.graceSeconds,
      def.concurrencyKey ?? null,
      toJson(def.scopes),
      def.state,
    ],
  )
  return res.insertId
}

/** Fields {@link update} may change; `undefined` leaves a field as it is. */
export interface DefinitionPatch {
  title?: string
  description?: string | null
  schedule?: string | null
  timezone?: string
  graceSeconds?: number
  concurrencyKey?: string | null
  scopes?: string[]
}

const PATCH_COLUMNS: Record<keyof DefinitionPatch, string> = {
  title: 'title',
  description: 'description',
  schedule: 'schedule',
  timezone: 'timezone',
  graceSeconds: 'grace_seconds',
  concurrencyKey: 'concurrency_key',
  scopes: 'scopes',
}

/**
 * Apply a patch. A change of schedule, zone or scopes resets the materialisation
 * watermark so the next pass re-evaluates the horizon. Answers whether the row exists.
 */
export async function update(db: Queryable, id: number, patch: DefinitionPatch): Promise<boolean> {
  const sets: string[] = []
  const args: SqlValue[] = []
  for (const [key, column] of Object.entries(PATCH_COLUMNS) as [keyof DefinitionPatch, string][]) {
    const value = patch[key]
    if (value === undefined) continue
    sets.push(`${column} = ?`)
    args.push(key === 'scopes' ? toJson(value) : (value as SqlValue))
  }
  if (patch.schedule !== undefined || patch.timezone !== undefined || patch.scopes !== undefined) {
    sets.push('materialized_through = NULL')
  }
  if (sets.length === 0) return (await getById(db, id)) !== null
  // Touch updated_at even when values are equal, so "found" never reads as "missing".
  sets.push('updated_at = NOW(3)')
  const res = await db.run(`UPDATE event_definitions SET ${sets.join(', ')} WHERE id = ?`, [...args, id])
  return res.affectedRows === 1
}

export async function getById(db: Queryable, id: number): Promise<DefinitionRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_DEF} WHERE id = ?`, [id])
  return row ? hydrate(row) : null
}

export async function getBySlug(db: Queryable, slug: string): Promise<DefinitionRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_DEF} WHERE slug = ?`, [slug])
  return row ? hydrate(row) : null
}

export async function getByIds(db: Queryable, ids: readonly number[]): Promise<DefinitionRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_DEF} WHERE id IN (${placeholders(ids.length)})`, [...ids])
  return rows.map(hydrate)
}

/** Definitions by slug, archived ones only when asked. */
export async function list(
  db: Queryable,
  opts: { includeArchived?: boolean } = {},
): Promise<DefinitionRow[]> {
  const rows = await db.execute<Raw>(
    opts.includeArchived
      ? `${SELECT_DEF} ORDER BY slug`
      : `${SELECT_DEF} WHERE state <> 'archived' ORDER BY slug`,
  )
  return rows.map(hydrate)
}

/** Active definitions with a schedule and a version: what materialisation walks. */
export async function listMaterialisable(db: Queryable): Promise<DefinitionRow[]> {
  const rows = await db.execute<Raw>(
    `${SELECT_DEF} WHERE state = 'active' AND schedule IS NOT NULL AND current_version_id IS NOT NULL ORDER BY id`,
  )
  return rows.map(hydrate)
}

/**
 * Move a definition to `state`. Archiving is refused while any of its runs is
 * not terminal. Answers whether the row changed.
 *
 * Archiving is a short transaction that first writes the definition's
 * `run_guard`, then counts its runs with a locking read (which sees the latest
 * committed rows, not a snapshot); `updated_at` is assigned itself so the
 * guard does not count as an edit. Everything that creates runs
 * ({@link lockForNewRuns}) writes the same column first. On one server the
 * second writer waits for the first; on a Galera cluster, where row locks do
 * not cross nodes, the two writes conflict in certification and the loser runs
 * again. Either way a run can never be added between the count and the archive.
 */
export async function setState(db: Db, id: number, state: DefinitionState): Promise<boolean> {
  if (state === 'archived') {
    return db.transaction(
      async (tx) => {
        const guard = await tx.run(
          'UPDATE event_definitions SET run_guard = run_guard + 1, updated_at = updated_at WHERE id = ?',
          [id],
        )
        if (guard.affectedRows !== 1) return false
        const [live] = await tx.execute<Raw>(
          `SELECT COUNT(*) AS n FROM event_runs
            WHERE definition_id = ? AND status IN (${placeholders(NON_TERMINAL.length)}) LOCK IN SHARE MODE`,
          [id, ...NON_TERMINAL],
        )
        if (Number(live?.n ?? 0) > 0) return false
        const res = await tx.run(`UPDATE event_definitions SET state = 'archived' WHERE id = ?`, [id])
        return res.affectedRows === 1
      },
      { retryable: true },
    )
  }
  const res = await db.run(
    // MariaDB assigns left to right and later expressions see earlier new values,
    // so the watermark must be decided before `state` is overwritten.
    `UPDATE event_definitions SET materialized_through = IF(state <> ?, NULL, materialized_through),
        state = ?
      WHERE id = ?`,
    [state, state, id],
  )
  return res.affectedRows === 1
}

/**
 * Inside a transaction that is about to create runs: write the definition's
 * `run_guard` (the write an archive must conflict with, on one server or
 * across the nodes of a cluster; see {@link setState}) and answer its current
 * state (null when it does not exist). The transaction should be marked
 * `retryable`: on a cluster it may lose that conflict at COMMIT.
 */
export async function lockForNewRuns(tx: Queryable, id: number): Promise<DefinitionState | null> {
  const guard = await tx.run(
    'UPDATE event_definitions SET run_guard = run_guard + 1, updated_at = updated_at WHERE id = ?',
    [id],
  )
  if (guard.affectedRows !== 1) return null
  const [row] = await tx.execute<Raw>('SELECT state FROM event_definitions WHERE id = ?', [id])
  return row ? (row.state as DefinitionState) : null
}

export async function setCurrentVersion(db: Queryable, id: number, versionId: number): Promise<void> {
  await db.run('UPDATE event_definitions SET current_version_id = ? WHERE id = ?', [versionId, id])
}

/** Record that occurrences up to `through` exist as runs; never moves backwards. */
export async function setWatermark(db: Queryable, id: number, through: Date): Promise<void> {
  await db.run(
    `UPDATE event_definitions SET materialized_through = ?
      WHERE id = ? AND (materialized_through IS NULL OR materialized_through < ?)`,
    [through, id, through],
  )
}
