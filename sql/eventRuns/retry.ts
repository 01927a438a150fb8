/**
 * The run side of retrying a FAILED run and of rehearsing at speed: the retry
 * of an original (one at most: `event_run_retries` is keyed by the original,
 * so no run but a retry writes anything to keep it), a new run put
 * straight into `starting` (its steps already written, so the ordinary
 * pick-up of a `starting` run expands nothing more and goes on), and a run's
 * speed.
 */
import type { Queryable } from '../db.ts'
import { placeholders } from '../json.ts'
import { KEY_HOLDING } from '../states.ts'
import type { Raw } from './rows.ts'

/** The id of the run that retries `originalId`, or null. */
export async function retryOf(db: Queryable, originalId: number): Promise<number | null> {
  const [row] = await db.execute<Raw>('SELECT run_id FROM event_run_retries WHERE original_id = ?', [
    originalId,
  ])
  return row ? Number(row.run_id) : null
}

/**
 * Mark a just-inserted run as the retry of `originalId` and put it in
 * `starting`, due now: the runner leases it like a start that was interrupted
 * after its claim, finds its steps written and runs the first unfinished one.
 * A second retry of the same original surfaces as DB_ERRNO.DUP_ENTRY, at the
 * first statement: a concurrent one waits there for the first to commit.
 */
export async function startAsRetry(tx: Queryable, id: number, originalId: number, now: Date): Promise<void> {
  await tx.run('INSERT INTO event_run_retries (original_id, run_id) VALUES (?, ?)', [originalId, id])
  await tx.run(
    `UPDATE event_runs SET retry_of = ?, status = 'starting', wake_at = ?, started_at = COALESCE(started_at, NOW(3)),
        missed_at = NULL, start_reserve = NULL
      WHERE id = ? AND status = 'scheduled'`,
    [originalId, now, id],
  )
}

/** Set a run's speed (a rehearsal's timers run 1/speed as long). */
export async function setSpeed(db: Queryable, id: number, speed: number): Promise<void> {
  await db.run('UPDATE event_runs SET speed = ? WHERE id = ?', [speed, id])
}

/** A run of this definition and scope in progress (what an overlap policy looks at), or null. */
export async function inProgressOfScope(
  db: Queryable,
  definitionId: number,
  scope: string,
): Promise<number | null> {
  const [row] = await db.execute<Raw>(
    `SELECT id FROM event_runs WHERE definition_id = ? AND scope = ? AND rehearsal = 0
        AND status IN (${placeholders(KEY_HOLDING.length)}) LIMIT 1`,
    [definitionId, scope, ...KEY_HOLDING],
  )
  return row ? Number(row.id) : null
}
