/**
 * `api_keys`: credentials managed through the API. The secret itself never
 * reaches this module: callers hand in its digest, and every read answers the
 * key without it.
 */
import type { Queryable } from './db.ts'
import { parseJson, placeholders, toJson } from './json.ts'

export interface ApiKeyRow {
  id: number
  name: string
  role: string
  teams: string[]
  prefix: string
  createdAt: Date
  createdBy: string
  expiresAt: Date | null
  lastUsedAt: Date | null
  revokedAt: Date | null
}

export interface NewApiKey {
  name: string
  role: string
  teams: readonly string[]
  prefix: string
  /** SHA-256 of the secret (32 bytes). */
  digest: Buffer
  createdBy: string
  expiresAt: Date | null
}

const COLUMNS = 'id, name, role, teams, prefix, created_at, created_by, expires_at, last_used_at, revoked_at'

function hydrate(r: Record<string, unknown>): ApiKeyRow {
  const teams = parseJson<unknown>(r.teams, [])
  return {
    id: Number(r.id),
    name: String(r.name),
    role: String(r.role),
    teams: Array.isArray(teams) ? teams.map(String) : [],
    prefix: String(r.prefix),
    createdAt: r.created_at as Date,
    createdBy: String(r.created_by),
    expiresAt: (r.expires_at as Date | null) ?? null,
    lastUsedAt: (r.last_used_at as Date | null) ?? null,
    revokedAt: (r.revoked_at as Date | null) ?? null,
  }
}

export async function insert(db: Queryable, k: NewApiKey): Promise<number> {
  const { insertId } = await db.run(
    `INSERT INTO api_keys (name, role, teams, prefix, digest, created_by, expires_at)
     VALUES (?, ?, ?, ?, ?, ?, ?)`,
    [k.name, k.role, toJson(k.teams) ?? '[]', k.prefix, k.digest, k.createdBy, k.expiresAt],
  )
  return insertId
}

export async function byId(db: Queryable, id: number): Promise<ApiKeyRow | null> {
  const rows = await db.execute<Record<string, unknown>>(`SELECT ${COLUMNS} FROM api_keys WHERE id = ?`, [id])
  return rows[0] ? hydrate(rows[0]) : null
}

/** The key whose secret has this digest, revoked or not (the caller decides). */
export async function byDigest(db: Queryable, digest: Buffer): Promise<ApiKeyRow | null> {
  const rows = await db.execute<Record<string, unknown>>(`SELECT ${COLUMNS} FROM api_keys WHERE digest = ?`, [
    digest,
  ])
  return rows[0] ? hydrate(rows[0]) : null
}

/** Newest first; at most 1000 (keys are made by hand, a list longer than that is a mistake to look at). */
export async function list(db: Queryable, opts: { includeRevoked: boolean }): Promise<ApiKeyRow[]> {
  const rows = await db.execute<Record<string, unknown>>(
    `SELECT ${COLUMNS} FROM api_keys WHERE (? = 1 OR revoked_at IS NULL) ORDER BY id DESC LIMIT 1000`,
    [opts.includeRevoked ? 1 : 0],
  )
  return rows.map(hydrate)
}

/** Revoke once: a second call keeps the first time. Answers whether this call revoked it. */
export async function revoke(db: Queryable, id: number, at: Date): Promise<boolean> {
  const { affectedRows } = await db.run(
    'UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL',
    [at, id],
  )
  return affectedRows > 0
}

/**
 * Why a key's row refuses it at `now`: revoked or expired, whichever came
 * first, or null while it may be used. The one rule for a lookup and a poll.
 */
export function endOf(
  key: { revokedAt: Date | null; expiresAt: Date | null },
  now: Date,
): 'revoked' | 'expired' | null {
  const expiredAt = key.expiresAt !== null && key.expiresAt <= now ? key.expiresAt : null
  if (key.revokedAt !== null && (expiredAt === null || key.revokedAt <= expiredAt)) return 'revoked'
  return expiredAt !== null ? 'expired' : null
}

/** A key that may no longer be used, and why: revoked (or gone), or past its expiry. */
export interface RefusedKey {
  id: number
  why: 'revoked' | 'expired'
}

/**
 * Of `ids`, those revoked, expired by `now`, or gone, with the reason each
 * ended (whichever came first; a deleted key counts as revoked): what every
 * instance polls for, in one statement.
 */
export async function refusedAmong(db: Queryable, ids: readonly number[], now: Date): Promise<RefusedKey[]> {
  if (ids.length === 0) return []
  const rows = await db.query<{ id: number | string; revoked_at: Date | null; expires_at: Date | null }>(
    `SELECT id, revoked_at, expires_at FROM api_keys WHERE id IN (${placeholders(ids.length)})`,
    [...ids],
  )
  const byId = new Map(rows.map((r) => [Number(r.id), r]))
  const refused: RefusedKey[] = []
  for (const id of ids) {
    const row = byId.get(id)
    const why = row ? endOf({ revokedAt: row.revoked_at, expiresAt: row.expires_at }, now) : 'revoked'
    if (why) refused.push({ id, why })
  }
  return refused
}

/**
 * Record that these keys were used at `at`, skipping a key whose recorded
 * use is less than `resolutionMs` older: one statement for all of them.
 */
export async function touch(
  db: Queryable,
  ids: readonly number[],
  at: Date,
  resolutionMs: number,
): Promise<void> {
  if (ids.length === 0) return
  await db.runQuery(
    `UPDATE api_keys SET last_used_at = ? WHERE id IN (${placeholders(ids.length)})
       AND (last_used_at IS NULL OR last_used_at < ?)`,
    [at, ...ids, new Date(at.getTime() - resolutionMs)],
  )
}
