/**
 * The start claim: the compare-and-set `scheduled → starting` of one run,
 * taking its concurrency key (a lock row per key) and its overlap lock in the
 * same short transaction, so two instances can never both start a holder of
 * one key. Guarded on the run's grace window (`missed_at`) and, for a run the
 * schedule made, on its definition being active.
 */
import { DB_ERRNO, type Db, isDbErrno, type Queryable } from '../db.ts'
import { LEASE_EXPIRY, leaseMicros } from '../leases.ts'
import { ClaimLost, inProgress, type OverlapCandidate, type OverlapOutcome, takeOverlap } from './overlap.ts'
import type { Raw } from './rows.ts'

// first. The same column as the missed sweep's, so the two agree at the
// boundary; a run without the stamp (none should be left) is not held back.
const WITHIN_GRACE = '(missed_at IS NULL OR missed_at >= ?)'
// A run the schedule made starts only while its definition is active: a pause
// withdraws those runs in the transaction that pauses, and this guard keeps a
// claim that raced it from starting one anyway. Runs a person asked for start.
const SCHEDULE_ACTIVE = `(NOT (started_by <=> 'schedule') OR (SELECT d.state FROM event_definitions d
     WHERE d.id = event_runs.definition_id) = 'active')`

/** The answer of {@link claimStart}. */
export interface ClaimStartResult {
  /** True when this caller now owns the run in `starting`. */
  claimed: boolean
  /** When the run must wait for another (its key's holder, or the occurrence BUFFER_ONE serves first): that run's id. */
  blockedBy: number | null
  /** Set when the run's overlap policy acted. */
  overlap?: OverlapOutcome
}

/** The run {@link claimStart} takes: its key and, for a run under an overlap policy, its scope and instant. */
export interface ClaimCandidate {
  id: number
  concurrencyKey: string | null
  definitionId?: number
  scope?: string
  scheduledFor?: Date
  overlap?: 'skip' | 'buffer_one' | 'cancel_other' | null
}

/**
 * Take ownership of a run that has not started: the compare-and-set
 * `scheduled → starting`, stamped with the lease.
 *
 * A run with a concurrency key takes it in the same short transaction: a lock
 * row per key is inserted (or taken over from a holder that is no longer
 * key-holding), then the run is claimed; both commit or neither does. The seed
 * read the holder and then claimed, which let two instances both see "free".
 * A blocked run stays `scheduled` (its grace window decides) and the answer
 * names the holder.
 *
 * A run under an overlap policy first takes its (definition, scope) overlap
 * lock the same way, in the same transaction, and when an earlier run of its
 * scope is in progress the policy decides (see {@link takeOverlap}); a key
 * that then blocks rolls the whole decision back.
 */
export async function claimStart(
  db: Db,
  run: ClaimCandidate,
  owner: string,
  leaseUntil: Date,
  now: Date = new Date(),
): Promise<ClaimStartResult> {
  const claimSql = `UPDATE event_runs
        SET status = 'starting', claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY}, claim_token = NULL, wake_at = ?,
            started_at = COALESCE(started_at, NOW(3)), start_reserve = NULL, missed_at = NULL
      WHERE id = ? AND status = 'scheduled' AND ${WITHIN_GRACE} AND ${SCHEDULE_ACTIVE}`
  const overlap = run.overlap && run.definitionId !== undefined ? run.overlap : null
  if (!run.concurrencyKey && !overlap) {
    const res = await db.run(`${claimSql} AND concurrency_key IS NULL`, [
      owner,
      leaseMicros(leaseUntil, now),
      leaseUntil,
      run.id,
      now,
    ])
    return { claimed: res.affectedRows === 1, blockedBy: null }
  }
  const key = run.concurrencyKey
  try {
    return await db.transaction(
      async (tx) => {
        let cancelled: OverlapOutcome | undefined
        if (overlap) {
          const decided = await takeOverlap(tx, { ...run, overlap } as OverlapCandidate)
          if (decided && decided.outcome !== 'cancelled') {
            return {
              claimed: false,
              blockedBy: 'holderId' in decided ? decided.holderId : null,
              overlap: decided,
            }
          }
          if (decided) cancelled = decided
        }
        // READ COMMITTED: no gap locks, so two claimers of a free key do not
        // deadlock; the second INSERT waits for the first and then sees its row.
        if (key) {
          const blockedBy = await takeKey(tx, key, run.id)
          // Nothing of this attempt stays (a holder cancelled for it included).
          if (blockedBy !== null) throw new KeyBlocked(blockedBy)
        }
        const res = await tx.run(`${claimSql} AND concurrency_key ${key ? '= ?' : 'IS NULL'}`, [
          owner,
          leaseMicros(leaseUntil, now),
          leaseUntil,
          run.id,
          now,
          ...(key ? [key] : []),
        ])
        if (res.affectedRows !== 1) {
          // Someone else moved the run; leave no lock behind for it.
          throw new ClaimLost()
        }
        return { claimed: true, blockedBy: null, ...(cancelled && { overlap: cancelled }) }
      },
      // Safe to repeat, and repeated when it loses a conflict: on a Galera
      // cluster two claimers on different nodes both see the key free and both
      // claim; one fails certification at COMMIT and, run again, sees the
      // winner's lock row. The answer is the committed attempt's.
      { isolation: 'READ COMMITTED', retryable: true },
    )
  } catch (err) {
    if (err instanceof KeyBlocked) return { claimed: false, blockedBy: err.holderId }
    if (err instanceof ClaimLost) {
      return { claimed: false, blockedBy: null }
    }
    // Still losing after every retry, or a duplicate between two claimers: a lost race, not a failure.
    if (isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK) || isDbErrno(err, DB_ERRNO.DUP_ENTRY)) {
      return { claimed: false, blockedBy: null }
    }
    throw err
  }
}

/** Take `key` for `runId` inside the claim's transaction; answers the live holder that blocks it, or null. */
export async function takeKey(tx: Queryable, key: string, runId: number): Promise<number | null> {
  const ins = await tx.run('INSERT IGNORE INTO concurrency_locks (lock_key, run_id) VALUES (?, ?)', [
    key,
    runId,
  ])
  if (ins.affectedRows === 1) return null
  const [lock] = await tx.execute<Raw>('SELECT run_id FROM concurrency_locks WHERE lock_key = ? FOR UPDATE', [
    key,
  ])
  const holderId = lock ? Number(lock.run_id) : null
  if (holderId !== null && holderId !== runId && (await inProgress(tx, holderId))) return holderId
  // The recorded holder ended (or vanished) without releasing: take over.
  const took = await tx.run(
    'UPDATE concurrency_locks SET run_id = ?, acquired_at = NOW(3) WHERE lock_key = ?',
    [runId, key],
  )
  // The row vanished between the duplicate check and the read: do not claim
  // without a lock; the next tick tries again.
  if (took.affectedRows !== 1) throw new ClaimLost()
  return null
}

class KeyBlocked extends Error {
  constructor(readonly holderId: number) {
    super('concurrency key held')
  }
}
