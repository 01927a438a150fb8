/**
 * Where the cue inboxes' doorbells are (migration 0026): the instances whose
 * inbox has subscribers, each waiting on a connection of its own to be rung
 * when a runner elsewhere parks cues (src/api/inboxBell.ts).
 */
import type { Queryable } from './db.ts'
import type { DoorbellAddress } from './runnerHeartbeats.ts'

/** Say (again) where this instance's inbox doorbell is; renews `seen_at`. */
export async function announce(
  db: Queryable,
  instanceId: string,
  bell: { connectionId: number; server: string },
): Promise<void> {
  await db.run(
    `INSERT INTO inbox_doorbells (instance_id, doorbell_connection, doorbell_server, seen_at)
     VALUES (?, ?, ?, NOW(3))
     ON DUPLICATE KEY UPDATE doorbell_connection = VALUES(doorbell_connection),
       doorbell_server = VALUES(doorbell_server), seen_at = NOW(3)`,
    [instanceId, bell.connectionId, bell.server],
  )
}

/** This instance's inbox has no doorbell any more (no subscribers, or stopping). */
export async function withdraw(db: Queryable, instanceId: string): Promise<void> {
  await db.run('DELETE FROM inbox_doorbells WHERE instance_id = ?', [instanceId])
}

/** The doorbells renewed since `since`, other than `except`'s (an instance's own inbox is woken in-process). */
export async function liveInboxDoorbells(
  db: Queryable,
  since: Date,
  except: string,
): Promise<Array<DoorbellAddress & { instanceId: string }>> {
  const rows = await db.execute<{
    instance_id: string
    doorbell_connection: number | string
    doorbell_server: string
  }>(
    `SELECT instance_id, doorbell_connection, doorbell_server FROM inbox_doorbells
      WHERE seen_at >= ? AND instance_id <> ? LIMIT 500`,
    [since, except],
  )
  return rows.map((r) => ({
    instanceId: r.instance_id,
    connectionId: Number(r.doorbell_connection),
    server: String(r.doorbell_server),
  }))
}

/** Forget the doorbells of instances gone without a word (crashed) since before `before`. */
export async function pruneBefore(db: Queryable, before: Date): Promise<number> {
  const res = await db.run('DELETE FROM inbox_doorbells WHERE seen_at < ?', [before])
  return res.affectedRows
}
