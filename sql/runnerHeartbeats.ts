/** `runner_heartbeats`: one row per runner instance, stamped every tick. */
import type { Queryable } from './db.ts'

export interface HeartbeatRow {
  instanceId: string
  host: string
  pid: number
  startedAt: Date
  lastTickAt: Date
  tickLagMs: number
  stoppedAt: Date | null
}

type Raw = Record<string, unknown>

/** Where a runner waits for a wake-up between passes (sql/doorbell.ts). */
export interface DoorbellAddress {
  connectionId: number
  server: string
}

export async function beat(
  db: Queryable,
  hb: {
    instanceId: string
    host: string
    pid: number
    startedAt: Date
    tickLagMs: number
    doorbell?: DoorbellAddress | null
  },
): Promise<void> {
  await db.run(
    `INSERT INTO runner_heartbeats
       (instance_id, host, pid, started_at, last_tick_at, tick_lag_ms, stopped_at, doorbell_connection, doorbell_server)
     VALUES (?, ?, ?, ?, NOW(3), ?, NULL, ?, ?)
     ON DUPLICATE KEY UPDATE last_tick_at = NOW(3), tick_lag_ms = VALUES(tick_lag_ms), stopped_at = NULL,
       doorbell_connection = VALUES(doorbell_connection), doorbell_server = VALUES(doorbell_server)`,
    [
      hb.instanceId,
      hb.host,
      hb.pid,
      hb.startedAt,
      Math.max(0, Math.round(hb.tickLagMs)),
      hb.doorbell?.connectionId ?? null,
      hb.doorbell?.server ?? null,
    ],
  )
}

/** The doorbells of the runners that ticked since `since` and have not stopped. */
export async function liveDoorbells(
  db: Queryable,
  since: Date,
): Promise<Array<DoorbellAddress & { instanceId: string }>> {
  const rows = await db.execute<Raw>(
    `SELECT instance_id, doorbell_connection, doorbell_server FROM runner_heartbeats
      WHERE last_tick_at >= ? AND stopped_at IS NULL AND doorbell_connection IS NOT NULL LIMIT 500`,
    [since],
  )
  return rows.map((r) => ({
    instanceId: String(r.instance_id),
    connectionId: Number(r.doorbell_connection),
    server: String(r.doorbell_server),
  }))
}

export async function markStopped(db: Queryable, instanceId: string): Promise<void> {
  await db.run('UPDATE runner_heartbeats SET stopped_at = NOW(3) WHERE instance_id = ?', [instanceId])
}

/** Instances that ticked since `since` and have not stopped, most recent first. */
export async function listLive(db: Queryable, since: Date): Promise<HeartbeatRow[]> {
  const rows = await db.execute<Raw>(
    `SELECT instance_id, host, pid, started_at, last_tick_at, tick_lag_ms, stopped_at FROM runner_heartbeats
      WHERE last_tick_at >= ? AND stopped_at IS NULL ORDER BY last_tick_at DESC LIMIT 500`,
    [since],
  )
  return rows.map((r) => ({
    instanceId: String(r.instance_id),
    host: String(r.host),
    pid: Number(r.pid),
    startedAt: r.started_at as Date,
    lastTickAt: r.last_tick_at as Date,
    tickLagMs: Number(r.tick_lag_ms),
    stoppedAt: (r.stopped_at as Date | null) ?? null,
  }))
}

/** Forget instances silent since `before` (housekeeping). */
export async function pruneBefore(db: Queryable, before: Date): Promise<number> {
  const res = await db.run('DELETE FROM runner_heartbeats WHERE last_tick_at < ?', [before])
  return res.affectedRows
}
