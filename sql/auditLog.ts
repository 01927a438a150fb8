/** `audit_log`: mutations outside one run's log (definitions, versions), with actor and outcome. */
import type { Queryable, Statement } from './db.ts'
import { clampLimit, parseJson, toJson } from './json.ts'

export interface AuditEntry {
  actor: string
  action: string
  targetType: string
  targetId: string | null
  outcome: 'ok' | 'refused' | 'error'
  detail?: unknown
}

export interface AuditRow extends AuditEntry {
  id: number
  at: Date
}

export async function record(db: Queryable, e: AuditEntry): Promise<void> {
  const st = recordStatement(e)
  await db.run(st.sql, st.params)
}

/** {@link record} as a statement for a batch. */
export function recordStatement(e: AuditEntry): Statement {
  return {
    sql: 'INSERT INTO audit_log (actor, action, target_type, target_id, outcome, detail) VALUES (?, ?, ?, ?, ?, ?)',
    params: [e.actor, e.action, e.targetType, e.targetId, e.outcome, toJson(e.detail)],
  }
}

/** Newest first. */
export async function list(
  db: Queryable,
  opts: { targetType?: string; targetId?: string; limit?: number } = {},
): Promise<AuditRow[]> {
  const n = clampLimit(opts.limit ?? 100, 100)
  const rows = await db.execute<Record<string, unknown>>(
    `SELECT id, at, actor, action, target_type, target_id, outcome, detail FROM audit_log
      WHERE (? IS NULL OR target_type = ?) AND (? IS NULL OR target_id = ?)
      ORDER BY id DESC LIMIT ${n}`,
    [opts.targetType ?? null, opts.targetType ?? null, opts.targetId ?? null, opts.targetId ?? null],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    at: r.at as Date,
    actor: String(r.actor),
    action: String(r.action),
    targetType: String(r.target_type),
    targetId: (r.target_id as string | null) ?? null,
    outcome: r.outcome as AuditRow['outcome'],
    detail: parseJson<unknown>(r.detail, null),
  }))
}

/**
 * Delete up to `limit` rows older than `ageMs`, oldest first (audit
 * retention); answers how many went. Age is read on the database's clock, the
 * one that stamped `at`, so a runner on a skewed host (or a test's clock)
 * cannot sweep rows early. One short statement per call, served by the `at`
 * index.
 */
export async function deleteOlderThan(db: Queryable, ageMs: number, limit = 1000): Promise<number> {
  const n = clampLimit(limit, 1000, 1, 10_000)
  const seconds = Math.max(0, Math.floor(ageMs / 1000))
  const res = await db.run(
    `DELETE FROM audit_log WHERE at < NOW(3) - INTERVAL ? SECOND ORDER BY at LIMIT ${n}`,
    [seconds],
  )
  return res.affectedRows
}
