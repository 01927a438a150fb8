/**
 * The key-less start's claim: the row locks of due scheduled runs that start
 * without a claim of their own (no concurrency key, no overlap policy), and
 * the guarded move that starts them, both in the starter's one transaction.
 * Runs that start by their own claims go through claimStart.ts; in-flight
 * runs are leased through claims.ts.
 */
import type { Queryable } from '../db.ts'
import { clampLimit, idSet } from '../json.ts'
import { LEASE_EXPIRY } from '../leases.ts'
import { hydrate, type Raw, RUN_COLUMNS, type RunRow, STARTS_UNDER_ROW_LOCK } from './rows.ts'
import { alertStatementsFor, sendTogether, transitionSets } from './transitions.ts'

/**
 * Lock up to `limit` due, key-less, scheduled runs for the caller's start
 * transaction, oldest due first. `SKIP LOCKED` passes over runs another instance
 * is starting at this moment instead of waiting for them. The row locks are the
 * claim: held only until the caller's transaction commits, which moves every
 * run it starts on with {@link markStarted}, so no transaction outlives it.
 *
 * The grace window is the caller's to check: a locking read that joined the
 * definitions would lock their rows as well, and serialise every starter on them.
 *
 * They are read from the scheduled range of `idx_evrun_due`: a key-less
 * scheduled run is due at its `scheduled_for` and its `wake_at` is NULL
 * (migration 0030), so a start that finishes the run leaves `idx_evrun_wake`
 * as it found it (NULL to NULL writes no entry). The range also
 * holds the scheduled runs that start by their own claims (a concurrency key
 * or an overlap policy, `keyedStart.ts`), which this read steps over, as the
 * wake range it used to read held those that were due.
 *
 * `after` starts the walk past a place in the due order (`scheduled_for`, `id`) that
 * an earlier batch of the same pass reached. A start moves its runs out of the
 * due index, but their old entries stay there, delete-marked, until InnoDB's
 * purge removes them, and a walk from the bottom steps over every one: the
 * last batches of a 20,000-run backlog spent tens of milliseconds on them, and
 * an empty walk right after it 36 ms. A run left behind the cursor (a batch
 * that rolled back, a run made due in the past) is found by the next pass,
 * which walks from the bottom again.
 *
 * Each run comes with `lockedAt`, the database's clock at the lock: the lock is
 * the start's claim, so it is the run's `started_at` (see {@link markStarted}),
 * as the keyed path stamps it at its claim.
 */
export async function lockDueToStart(
  tx: Queryable,
  now: Date,
  limit: number,
  after?: DuePlace,
): Promise<LockedRun[]> {
  const n = clampLimit(limit, 100, 1, 5000)
  const past = after ? ' AND (r.scheduled_for > ? OR (r.scheduled_for = ? AND r.id > ?))' : ''
  // Walk the due index in order and stop at the limit. A plan that sorted
  // instead (the optimiser's pick on a small table) would lock every due row it
  // read before sorting, and a second instance would then find nothing to start.
  // Prepared (binary protocol): the shape is fixed for a batch size, and its
  // rows arrive as binary values, cheaper to decode than text for thousands of
  // rows a batch (dates especially).
  const rows = await tx.execute<Raw>(
    `SELECT ${RUN_COLUMNS}, NOW(3) AS locked_at FROM event_runs r FORCE INDEX (idx_evrun_due)
      WHERE r.status = 'scheduled' AND r.scheduled_for <= ?${past} AND ${STARTS_UNDER_ROW_LOCK}
      ORDER BY r.scheduled_for, r.id
      LIMIT ${n}
      FOR UPDATE SKIP LOCKED`,
    after ? [now, after.scheduledFor, after.scheduledFor, after.id] : [now],
  )
  return rows.map((row) => Object.assign(hydrate(row), { lockedAt: row.locked_at as Date }))
}

/** A run {@link lockDueToStart} locked, and when (the database's clock). */
export type LockedRun = RunRow & { lockedAt: Date }

/** A place in the order {@link lockDueToStart} walks: a run's `scheduled_for`, then its id. */
export interface DuePlace {
  scheduledFor: Date
  id: number
}

/** Where {@link markStarted} leaves runs: finished, or claimed by the starter for what remains. */
export type StartedAs =
  | { status: 'completed'; phase: string | null }
  | {
      status: 'running' | 'ending'
      phase: string | null
      owner: string
      token: string
      /** On the runner's clock: the run's `wake_at`. */
      leaseUntil: Date
      /** The lease's length: its expiry is `NOW(3)` plus this, on the database's clock. */
      leaseMs: number
    }
  /** In flight without a claim, due at `wakeAt` (the starter spent its step budget). */
  | { status: 'running' | 'ending'; phase: string | null; owner?: undefined; wakeAt: Date }

/**
 * The start transaction's guarded move out of `scheduled`, for runs that
 * {@link lockDueToStart} locked: straight to `completed` when every step ran in
 * that transaction, otherwise to `running`/`ending` under the starter's lease.
 * Answers how many moved; the caller holds their locks, so anything short of
 * all of them is a bug it must roll back.
 */
export async function markStarted(
  tx: Queryable,
  ids: readonly number[],
  as: StartedAs,
  opts: {
    /** The start's claim, {@link LockedRun.lockedAt}; the time of this UPDATE when not given. */
    startedAt?: Date
  } = {},
): Promise<number> {
  if (ids.length === 0) return 0
  // The same SET clauses as every guarded transition (a terminal target stamps
  // ended_at and drops claim and wake_at), plus the start's own.
  let wakeAt: Date | undefined
  let claim: [owner: string, token: string, micros: number] | null = null
  if (as.status !== 'completed') {
    if (as.owner !== undefined) {
      claim = [as.owner, as.token, Math.round(as.leaseMs * 1000)]
      wakeAt = as.leaseUntil
    } else {
      wakeAt = as.wakeAt
    }
  }
  const { sets, args, owed } = transitionSets(as.status, { phase: as.phase, ...(wakeAt && { wakeAt }) })
  if (opts.startedAt) {
    sets.push('started_at = ?')
    args.push(opts.startedAt)
  } else sets.push('started_at = NOW(3)')
  if (claim) {
    sets.push('claimed_by = ?', 'claim_token = ?', `claim_expires_at = ${LEASE_EXPIRY}`)
    args.push(...claim)
  }
  const which = idSet('id', ids)
  // A batch that completes owes RUN_COMPLETED: its statements follow the
  // UPDATE in the start's transaction, and write nothing while no channel listens.
  const [moved] = await sendTogether(tx, [
    {
      sql: `UPDATE event_runs SET ${sets.join(', ')} WHERE ${which.sql} AND status = 'scheduled'`,
      params: [...args, ...which.args],
    },
    ...alertStatementsFor(owed, ids),
  ])
  return moved?.affectedRows ?? 0
}
