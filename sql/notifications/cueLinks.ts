/** `cue_links`: answer-link capabilities, stored only as the SHA-256 of the token. */
import type { Queryable } from '../db.ts'

export interface CueLinkRow {
  stepId: number
  channelName: string
  usedAt: Date | null
}

export async function create(
  db: Queryable,
  digest: string,
  stepId: number,
  channelName: string,
): Promise<void> {
  await db.run('INSERT INTO cue_links (digest, step_id, channel_name) VALUES (?, ?, ?)', [
    digest,
    stepId,
    channelName,
  ])
}

export async function find(db: Queryable, digest: string): Promise<CueLinkRow | null> {
  const [row] = await db.execute('SELECT step_id, channel_name, used_at FROM cue_links WHERE digest = ?', [
    digest,
  ])
  if (!row) return null
  return {
    stepId: Number(row.step_id),
    channelName: String(row.channel_name),
    usedAt: (row.used_at as Date | null) ?? null,
  }
}

/** Spend a link: true for the one call that found it unused. */
export async function use(db: Queryable, digest: string): Promise<boolean> {
  const res = await db.run('UPDATE cue_links SET used_at = NOW(3) WHERE digest = ? AND used_at IS NULL', [
    digest,
  ])
  return res.affectedRows === 1
}
