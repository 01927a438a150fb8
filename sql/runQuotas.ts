/** `run_quotas`: runs created per principal per minute, counted for every instance on one database. */
import type { Queryable } from './db.ts'

/**
 * Take `n` runs from `principal`'s count for `minute` (whole minutes since the
 * epoch) if that leaves it at most `max`. Answers whether it did, and the count
 * as it stands. The guarded UPDATE applies only while there is room, so
 * concurrent takers (on any instance) never pass `max` together.
 */
export async function take(
  db: Queryable,
  principal: string,
  minute: number,
  n: number,
  max: number,
): Promise<{ taken: boolean }> {
  await db.run(
    'INSERT INTO run_quotas (principal, window_minute, runs) VALUES (?, ?, 0) ON DUPLICATE KEY UPDATE runs = runs',
    [principal, minute],
  )
  const res = await db.run(
    'UPDATE run_quotas SET runs = runs + ? WHERE principal = ? AND window_minute = ? AND runs + ? <= ?',
    [n, principal, minute, n, max],
  )
  return { taken: res.affectedRows > 0 }
}

/** Delete the counts of minutes before `minute`; answers how many rows went. */
export async function deleteBefore(db: Queryable, minute: number, limit = 1000): Promise<number> {
  const res = await db.run(`DELETE FROM run_quotas WHERE window_minute < ? LIMIT ${Math.trunc(limit)}`, [
    minute,
  ])
  return res.affectedRows
}
