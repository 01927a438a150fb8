/**
 * `notification_deliveries`: one row per (event, channel). The dispatcher
 * claims due rows with a compare-and-set under a lease, like runs: an UPDATE
 * that only rows nobody holds can match, stamped with a token of its own, so
 * of N instances exactly one holds a delivery at a time; every later move is
 * guarded on that token.
 */
import type { Queryable } from '../db.ts'
import { clampLimit, idSet, parseJson } from '../json.ts'

export type DeliveryStatus = 'PENDING' | 'DELIVERED' | 'FAILED'

export interface DeliveryRow {
  id: number
  eventRowId: number
  eventId: string
  event: string
  channelId: number
  runId: number | null
  stepId: number | null
  status: DeliveryStatus
  rehearsal: boolean
  attempts: number
  lastError: string | null
  createdAt: Date
  deliveredAt: Date | null
  nextAttemptAt: Date | null
  giveUpAt: Date | null
  payload: Record<string, unknown>
}

const SELECT = `SELECT d.id, d.event_row_id, e.event_id, e.type, d.channel_id, d.run_id, e.step_id, d.status,
  d.rehearsal, d.attempts, d.last_error, d.created_at, d.delivered_at, d.next_attempt_at, d.give_up_at, e.payload
  FROM notification_deliveries d JOIN notification_events e ON e.id = d.event_row_id`

function hydrate(r: Record<string, unknown>): DeliveryRow {
  return {
    id: Number(r.id),
    eventRowId: Number(r.event_row_id),
    eventId: String(r.event_id),
    event: String(r.type),
    channelId: Number(r.channel_id),
    runId: r.run_id === null ? null : Number(r.run_id),
    stepId: r.step_id === null ? null : Number(r.step_id),
    status: r.status as DeliveryStatus,
    rehearsal: Boolean(Number(r.rehearsal)),
    attempts: Number(r.attempts),
    lastError: (r.last_error as string | null) ?? null,
    createdAt: r.created_at as Date,
    deliveredAt: (r.delivered_at as Date | null) ?? null,
    nextAttemptAt: (r.next_attempt_at as Date | null) ?? null,
    giveUpAt: (r.give_up_at as Date | null) ?? null,
    payload: parseJson<Record<string, unknown>>(r.payload, {}),
  }
}

export async function getById(db: Queryable, id: number): Promise<DeliveryRow | null> {
  const [row] = await db.execute(`${SELECT} WHERE d.id = ?`, [id])
  return row ? hydrate(row) : null
}

/** True when some delivery is due: a read of the due index that finds nothing when idle. */
export async function anyDue(db: Queryable): Promise<boolean> {
  const rows = await db.execute(
    `SELECT 1 AS due FROM notification_deliveries
      WHERE status = 'PENDING' AND next_attempt_at <= NOW(3) LIMIT 1`,
  )
  return rows.length > 0
}

/**
 * Claim up to `limit` due deliveries nobody holds (or whose holder's lease ran
 * out) for `leaseMs`, under `token`; answers them.
 */
export async function claimDue(
  db: Queryable,
  owner: string,
  token: string,
  leaseMs: number,
  limit: number,
): Promise<DeliveryRow[]> {
  const n = clampLimit(limit, 20, 1, 200)
  const res = await db.run(
    `UPDATE notification_deliveries
        SET claimed_by = ?, claim_token = ?, claim_expires_at = NOW(3) + INTERVAL ? MICROSECOND
      WHERE status = 'PENDING' AND next_attempt_at <= NOW(3)
        AND (claim_expires_at IS NULL OR claim_expires_at < NOW(3))
      ORDER BY next_attempt_at LIMIT ${n}`,
    [owner, token, Math.round(leaseMs * 1000)],
  )
  if (res.affectedRows === 0) return []
  const rows = await db.execute(`${SELECT} WHERE d.claim_token = ? AND d.status = 'PENDING'`, [token])
  return rows.map(hydrate)
}

/**
 * Attempts that got through, set-wise: one statement (one commit) for a
 * dispatcher pass instead of one per delivery. Only rows still claimed under
 * `token` move; answers how many did.
 */
export async function markDeliveredMany(
  db: Queryable,
  ids: readonly number[],
  token: string,
): Promise<number> {
  if (ids.length === 0) return 0
  const set = idSet('id', ids)
  const res = await db.run(
    `UPDATE notification_deliveries
        SET status = 'DELIVERED', attempts = attempts + 1, delivered_at = NOW(3), last_error = NULL,
            next_attempt_at = NULL, claimed_by = NULL, claim_token = NULL, claim_expires_at = NULL
      WHERE ${set.sql} AND claim_token = ?`,
    [...set.args, token],
  )
  return res.affectedRows
}

/**
 * An attempt failed: tried again in `delayMs`, or FAILED when that would be
 * past give_up_at or the failure is `final`. Answers the new status (null when
 * the claim was no longer ours).
 */
export async function markFailed(
  db: Queryable,
  id: number,
  token: string,
  error: string,
  delayMs: number,
  final: boolean,
): Promise<DeliveryStatus | null> {
  const micros = Math.round(delayMs * 1000)
  const res = await db.run(
    `UPDATE notification_deliveries
        SET attempts = attempts + 1, last_error = ?,
            status = IF(? = 1 OR NOW(3) + INTERVAL ? MICROSECOND > give_up_at, 'FAILED', 'PENDING'),
            next_attempt_at = IF(status = 'FAILED', NULL, NOW(3) + INTERVAL ? MICROSECOND),
            claimed_by = NULL, claim_token = NULL, claim_expires_at = NULL
      WHERE id = ? AND claim_token = ?`,
    [error.slice(0, 1000), final ? 1 : 0, micros, micros, id, token],
  )
  if (res.affectedRows !== 1) return null
  const [row] = await db.execute('SELECT status FROM notification_deliveries WHERE id = ?', [id])
  return (row?.status as DeliveryStatus | undefined) ?? null
}

/** `redeliver`: due again now, retried for another 24 h; answers false for a rehearsal's. */
export async function redeliver(db: Queryable, id: number): Promise<boolean> {
  const res = await db.run(
    `UPDATE notification_deliveries
        SET status = 'PENDING', next_attempt_at = NOW(3), give_up_at = NOW(3) + INTERVAL 24 HOUR,
            delivered_at = NULL, claimed_by = NULL, claim_token = NULL, claim_expires_at = NULL
      WHERE id = ? AND rehearsal = 0`,
    [id],
  )
  return res.affectedRows === 1
}

export interface DeliveryFilter {
  channelId: number | null
  runId: number | null
  status: DeliveryStatus | null
  /** Newest first: ids below this one. */
  beforeId: number | null
  limit: number
}

/** Newest first; answers one row more than `limit` when another page follows. */
export async function page(db: Queryable, f: DeliveryFilter): Promise<DeliveryRow[]> {
  const n = clampLimit(f.limit, 50, 1, 500) + 1
  const rows = await db.execute(
    `${SELECT} WHERE (? IS NULL OR d.channel_id = ?) AND (? IS NULL OR d.run_id = ?) AND (? IS NULL OR d.status = ?)
        AND (? IS NULL OR d.id < ?)
      ORDER BY d.id DESC LIMIT ${n}`,
    [f.channelId, f.channelId, f.runId, f.runId, f.status, f.status, f.beforeId, f.beforeId],
  )
  return rows.map(hydrate)
}

/**
 * Outbox retention: events older than `before` whose deliveries are all
 * finished (DELIVERED or FAILED), with their deliveries; at most `limit` per
 * call. Answers how many events went.
 */
export async function deleteFinishedBefore(db: Queryable, before: Date, limit: number): Promise<number> {
  const n = clampLimit(limit, 1000, 1, 5000)
  const ids = await db.execute(
    `SELECT e.id FROM notification_events e
      WHERE e.occurred_at < ?
        AND NOT EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.event_row_id = e.id AND d.status = 'PENDING')
      ORDER BY e.occurred_at LIMIT ${n}`,
    [before],
  )
  if (ids.length === 0) return 0
  const list = ids.map((r) => Number(r.id))
  const res = await db.runQuery(
    `DELETE FROM notification_events WHERE id IN (${list.map(() => '?').join(', ')})`,
    list,
  )
  return res.affectedRows
}
