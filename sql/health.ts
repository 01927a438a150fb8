/** Cheap probes for /readyz and the `health` query. */
import type { Queryable } from './db.ts'

/** True when the database answers a trivial query. */
export async function databaseAnswers(db: Queryable): Promise<boolean> {
  try {
    await db.query('SELECT 1')
    return true
  } catch {
    // The caller reports "database: false"; the reason is in the pool's own error log.
    return false
  }
}
