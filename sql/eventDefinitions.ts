/**
 * `event_definitions`: what an event is and when it happens. The slug is
 * immutable; the program lives in `event_versions` and the definition points at
 * its current version.
 */

import type { Db, Queryable, SqlValue } from './db.ts'
import { withdrawScheduled } from './eventRuns/materialise.ts'
import { transitionSets } from './eventRuns/transitions.ts'
import { parseJson, placeholders, toJson } from './json.ts'
import type { DefinitionState, OverlapPolicy } from './states.ts'

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
  materialisedThrough: Date | null
  /** Bumped with every change to its calendars or one-off occurrence changes (see {@link bumpExceptions}). */
  exceptionsRev: number
  /** What an occurrence does when an earlier run of its scope is still in progress. */
  overlap: OverlapPolicy
  /** No occurrence before this instant (inclusive bound); null = unbounded. */
  startsAt: Date | null
  /** No occurrence after this instant (inclusive bound); null = unbounded. */
  endsAt: Date | null
  createdAt: Date
  updatedAt: Date
}

type Raw = Record<string, unknown>

const SELECT_DEF = `SELECT id, slug, title, description, schedule, timezone, grace_seconds, concurrency_key, scopes,
  state, current_version_id, materialized_through, overlap, starts_at, ends_at, created_at, updated_at,
  exceptions_rev FROM event_definitions`

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
    materialisedThrough: (row.materialized_through as Date | null) ?? null,
    exceptionsRev: Number(row.exceptions_rev ?? 0),
    overlap: (row.overlap as OverlapPolicy | null) ?? 'allow_all',
    startsAt: (row.starts_at as Date | null) ?? null,
    endsAt: (row.ends_at as Date | null) ?? null,
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
  overlap?: OverlapPolicy
  startsAt?: Date | null
  endsAt?: Date | null
}

/** Insert a definition; a duplicate slug surfaces as DB_ERRNO.DUP_ENTRY for the caller to map. */
export async function create(db: Queryable, def: NewDefinition): Promise<number> {
  const res = await db.run(
    `INSERT INTO event_definitions (slug, title, description, schedule, timezone, grace_seconds, concurrency_key, scopes,
       state, overlap, starts_at, ends_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
      def.overlap ?? 'allow_all',
      def.startsAt ?? null,
      def.endsAt ?? null,
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
  overlap?: OverlapPolicy
  startsAt?: Date | null
  endsAt?: Date | null
}

const PATCH_COLUMNS: Record<keyof DefinitionPatch, string> = {
  title: 'title',
  description: 'description',
  schedule: 'schedule',
  timezone: 'timezone',
  graceSeconds: 'grace_seconds',
  concurrencyKey: 'concurrency_key',
  scopes: 'scopes',
  overlap: 'overlap',
  startsAt: 'starts_at',
  endsAt: 'ends_at',
}

/**
 * Apply a patch. A change of schedule, zone, scopes or bounds resets the
 * materialisation watermarks so the next pass re-evaluates the horizon; a change
 * of overlap policy applies to the runs not yet started. Answers whether the
 * row exists.
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
  const replan = reschedules(patch)
  if (replan) sets.push('materialized_through = NULL')
  if (sets.length === 0) return (await getById(db, id)) !== null
  // Touch updated_at even when values are equal, so "found" never reads as "missing".
  sets.push('updated_at = NOW(3)')
  const res = await db.run(`UPDATE event_definitions SET ${sets.join(', ')} WHERE id = ?`, [...args, id])
  if (res.affectedRows !== 1) return false
  if (replan) await clearWatermarks(db, id)
  if (patch.overlap !== undefined) {
    await db.run(
      `UPDATE event_runs SET overlap = ? WHERE definition_id = ? AND status = 'scheduled' AND rehearsal = 0`,
      [runOverlap(patch.overlap), id],
    )
  }
  return true
}

/** True when the patch changes which occurrences the schedule has. */
export function reschedules(patch: DefinitionPatch): boolean {
  return (
    patch.schedule !== undefined ||
    patch.timezone !== undefined ||
    patch.scopes !== undefined ||
    patch.startsAt !== undefined ||
    patch.endsAt !== undefined
  )
}

/** The value a run stores for its definition's policy: NULL for `allow_all` (the set-wise start path). */
export function runOverlap(policy: OverlapPolicy): Exclude<OverlapPolicy, 'allow_all'> | null {
  return policy === 'allow_all' ? null : policy
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

/** What {@link setState} did. */
export type StateChange =
  /** Applied: how many never-started runs the schedule made were withdrawn (deleted), how many a person scheduled were cancelled. */
  | { applied: true; withdrawn: number; cancelled: number }
  /** Archiving refused: this many runs are in progress. */
  | { applied: false; inProgress: number }

/** Statuses of a run in progress (what refuses an archive). */
const IN_PROGRESS = ['starting', 'running', 'paused', 'ending'] as const

/**
 * Move a definition to `state`, with what that means for its runs, in one
 * transaction (null when the definition does not exist):
 * - `paused`: the never-started runs its schedule made are withdrawn (deleted:
 *   they are projections of the schedule, and nothing a person did is lost);
 *   runs a person scheduled stay.
 * - `archived`: refused while a run is in progress; otherwise the schedule's
 *   never-started runs are withdrawn and the ones a person scheduled cancelled
 *   with `archivedReason`.
 * - any change: the materialisation watermarks go, so a schedule that becomes
 *   active again resumes from then, not from where it stopped.
 *
 * The transaction first writes the definition's `run_guard` (`updated_at` is
 * assigned itself, so the guard is not an edit). Everything that creates runs
 * ({@link lockForNewRuns}) writes the same column first, so no run is added
 * meanwhile: on one server the second writer waits for the first; on a Galera
 * cluster, where row locks do not cross nodes, the two writes conflict in
 * certification and the loser runs again (the transaction is safe to repeat).
 * A starter that locked a run first makes the withdrawal wait for its commit
 * (that run started before the change), and one that comes later finds the
 * run gone; across nodes, the same rows written by both make one of them lose.
 */
export async function setState(
  db: Db,
  id: number,
  state: DefinitionState,
  archivedReason = 'definition archived',
): Promise<StateChange | null> {
  return db.transaction((tx) => setStateIn(tx, id, state, archivedReason), { retryable: true })
}

/** Runs withdrawn per statement when a definition is paused or archived. */
const WITHDRAW_BATCH = 1000

/** {@link setState} inside the caller's transaction (applyDefinitions changes a definition in one). */
export async function setStateIn(
  tx: Queryable,
  id: number,
  state: DefinitionState,
  archivedReason = 'definition archived',
): Promise<StateChange | null> {
  const guard = await tx.run(
    'UPDATE event_definitions SET run_guard = run_guard + 1, updated_at = updated_at WHERE id = ?',
    [id],
  )
  if (guard.affectedRows !== 1) return null
  if (state === 'archived') {
    // A locking read sees the latest committed rows, not a snapshot.
    const [live] = await tx.execute<Raw>(
      `SELECT COUNT(*) AS n FROM event_runs
          WHERE definition_id = ? AND status IN (${placeholders(IN_PROGRESS.length)}) LOCK IN SHARE MODE`,
      [id, ...IN_PROGRESS],
    )
    const inProgress = Number(live?.n ?? 0)
    if (inProgress > 0) return { applied: false, inProgress }
  }
  let withdrawn = 0
  let cancelled = 0
  if (state !== 'active') {
    // The runs first (locked: the run guard above keeps new ones out), then
    // withdrawn a batch at a time, their rows before them (no foreign key
    // cascades, migration 0024); the transaction makes the batches one change.
    const doomed = await tx.execute<Raw>(
      `SELECT id FROM event_runs
        WHERE definition_id = ? AND status = 'scheduled' AND started_by <=> 'schedule' FOR UPDATE`,
      [id],
    )
    const ids = doomed.map((r) => Number(r.id))
    for (let from = 0; from < ids.length; from += WITHDRAW_BATCH)
      withdrawn += await withdrawScheduled(tx, ids.slice(from, from + WITHDRAW_BATCH))
  }
  if (state === 'archived') {
    const { sets, args } = transitionSets('cancelled', { error: archivedReason })
    const res = await tx.run(
      `UPDATE event_runs SET ${sets.join(', ')} WHERE definition_id = ? AND status = 'scheduled'`,
      [...args, id],
    )
    cancelled = res.affectedRows
  }
  await tx.run(`UPDATE event_definitions SET state = ?, materialized_through = NULL WHERE id = ?`, [
    state,
    id,
  ])
  await clearWatermarks(tx, id)
  return { applied: true, withdrawn, cancelled }
}

/** How many runs of each definition are in progress (what refuses an archive); absent = none. */
export async function inProgressCounts(db: Queryable, ids: readonly number[]): Promise<Map<number, number>> {
  const counts = new Map<number, number>()
  if (ids.length === 0) return counts
  const rows = await db.query<Raw>(
    `SELECT definition_id, COUNT(*) AS n FROM event_runs
      WHERE definition_id IN (${placeholders(ids.length)}) AND status IN (${placeholders(IN_PROGRESS.length)})
      GROUP BY definition_id`,
    [...ids, ...IN_PROGRESS],
  )
  for (const row of rows) counts.set(Number(row.definition_id), Number(row.n))
  return counts
}

/** Forget how far a definition is materialised: the next pass starts from its own now. */
export async function clearWatermarks(db: Queryable, definitionId: number): Promise<void> {
  await db.run('DELETE FROM schedule_watermarks WHERE definition_id = ?', [definitionId])
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

/**
 * Record that occurrences up to `through` exist as runs; never moves backwards.
 * Machinery, not an edit: `updated_at` keeps saying when a person last changed the definition.
 */
export async function setWatermark(db: Queryable, id: number, through: Date): Promise<void> {
  await db.run(
    `UPDATE event_definitions SET materialized_through = ?, updated_at = updated_at
      WHERE id = ? AND (materialized_through IS NULL OR materialized_through < ?)`,
    [through, id, through],
  )
}

/**
 * Materialise a definition afresh from now: what a change of the days it may
 * run on (its calendars) needs, so the occurrences such a change frees inside
 * the horizon are made. The runs that exist are kept (the unique key makes the
 * next pass skip them).
 */
export async function replan(db: Queryable, id: number): Promise<void> {
  await db.run(
    'UPDATE event_definitions SET materialized_through = NULL, updated_at = updated_at WHERE id = ?',
    [id],
  )
  await clearWatermarks(db, id)
}

/**
 * Note a change to what excepts these definitions' occurrences (a calendar,
 * a skip, a move), in the transaction that makes it; see {@link exceptionsRevOf}.
 */
export async function bumpExceptions(db: Queryable, ids: readonly number[]): Promise<void> {
  if (ids.length === 0) return
  await db.runQuery(
    `UPDATE event_definitions SET exceptions_rev = exceptions_rev + 1, updated_at = updated_at
      WHERE id IN (${placeholders(ids.length)})`,
    [...ids],
  )
}

/**
 * A definition's exceptions revision, read inside a transaction that holds its
 * run guard ({@link lockForNewRuns}): a materialisation pass compares it with
 * the revision its exceptions were read at.
 */
export async function exceptionsRevOf(tx: Queryable, id: number): Promise<number> {
  const [row] = await tx.execute<Raw>('SELECT exceptions_rev FROM event_definitions WHERE id = ?', [id])
  return Number(row?.exceptions_rev ?? 0)
}
