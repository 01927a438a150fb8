/**
 * The runner's claims on `event_runs`: finding due runs, taking ownership with
 * compare-and-set UPDATEs (`affectedRows = 1` is ownership; no transaction is
 * held open while the work happens), leases, release and reclaim.
 *
 * The due query reads `wake_at`, which is NULL or in the future for every run
 * parked on a cue, waiting out a timer or leased, so idle runs leave the index
 * and cannot starve new ones. Taking a concurrency key inserts a
 * `concurrency_locks` row in the same short transaction as the claim, so two
 * instances can never both start a holder of one key.
 *
 * Clocks: a lease's expiry is set and compared on the database's clock
 * (`NOW(3)`, see sql/leases.ts), so instances with skewed clocks cannot take
 * over each other's live leases; due times (`wake_at`, the `now` passed in)
 * stay on the runner's clock. A function that sets a lease takes `leaseUntil`
 * and `now` from the runner's clock: `leaseUntil` becomes `wake_at` (a crashed
 * owner's run comes due by itself) and `leaseUntil - now` the lease's length.
 */

import { DB_ERRNO, type Db, isDbErrno, type Queryable } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import { LEASE_EXPIRY, leaseFree, leaseMicros } from '../leases.ts'
import { IN_FLIGHT, KEY_HOLDING } from '../states.ts'
import { hydrate, type Raw, type RunRow, SELECT_RUN, sortRows } from './rows.ts'
import { releaseKey, transitionSets } from './transitions.ts'

const DUE_STATUSES = ['scheduled', ...IN_FLIGHT] as const

/**
 * The grace window applies to this run (`r` aliased): not backfilled, not held
 * back by BUFFER_ONE. What the missed sweep requires; {@link WITHIN_GRACE} is
 * the claim's side of the same rule, and `src/runner/grace.ts` the batch start's.
 */
const GRACE_APPLIES = 'r.grace_exempt = 0'

/**
 * Runs that need the runner now: `wake_at` has passed and the run is not paused
 * or terminal. It selects rather than claims, so two sweepers may see the same
 * candidates and then disagree, harmlessly, about who owns each.
 *
 * Unlike the seed's "50 oldest in flight", idle runs are not candidates at all:
 * a run parked on a cue has `wake_at` NULL (or its timeout), a run waiting out a
 * timer has it in the future, and a leased run has it at its lease expiry. So
 * 10,000 parked runs cost this query nothing.
 */
export async function findDue(db: Queryable, now: Date, limit = 50): Promise<RunRow[]> {
  const n = clampLimit(limit, 50)
  const rows = await db.execute<Raw>(
    `${SELECT_RUN}
      WHERE r.wake_at <= ? AND r.status IN (${placeholders(DUE_STATUSES.length)})
      ORDER BY r.wake_at, r.id
      LIMIT ${n}`,
    [now, ...DUE_STATUSES],
  )
  return rows.map(hydrate)
}

/**
 * The soonest `wake_at` after `now` among runs the runner will need to look at
 * (scheduled or in flight), or null when there is none. The runner aims its
 * sleep at it, so a run due between two ticks starts at its time rather than at
 * the next tick. One walk of `idx_evrun_wake` from `now`: parked, paused and
 * terminal runs have no `wake_at` and are not in its way.
 */
export async function nextWakeAfter(db: Queryable, now: Date): Promise<Date | null> {
  const rows = await db.execute<{ wake_at: Date }>(
    `SELECT wake_at FROM event_runs FORCE INDEX (idx_evrun_wake)
      WHERE wake_at > ? AND status IN (${placeholders(DUE_STATUSES.length)})
      ORDER BY wake_at
      LIMIT 1`,
    [now, ...DUE_STATUSES],
  )
  return rows[0]?.wake_at ?? null
}

/**
 * Due scheduled runs that carry a concurrency key or an overlap policy, oldest
 * due first. They are started one by one (each takes its key lock, or its
 * scope's overlap lock, with its claim), so they are
 * found by a query of their own, on an index that holds only them
 * (`keyed_due_at`, migration 0006): however many key-less runs are due, a keyed
 * run is seen as soon as it is due, not after the backlog ahead of it.
 */
export async function findDueKeyed(db: Queryable, now: Date, limit = 50): Promise<RunRow[]> {
  const n = clampLimit(limit, 50)
  const rows = await db.execute<Raw>(
    `${SELECT_RUN} FORCE INDEX (idx_evrun_keyed_due)
      WHERE r.keyed_due_at <= ? AND r.status = 'scheduled'
        AND (r.concurrency_key IS NOT NULL OR r.overlap IS NOT NULL)
      ORDER BY r.keyed_due_at, r.id
      LIMIT ${n}`,
    [now],
  )
  return rows.map(hydrate)
}

/**
 * Scheduled runs whose start instant passed more than their own definition's
 * grace window ago. Only `scheduled` qualifies: a run that reached `starting` has
 * begun, and "began then stalled" is a different fact from "never began".
 */
export async function findMissed(db: Queryable, now: Date, limit = 100): Promise<RunRow[]> {
  const n = clampLimit(limit, 100)
  // Ids first, then rows: the join sorts through a temporary table, which must
  // not carry the runs' JSON columns (that puts it on disk, every tick; see list).
  const rows = await db.execute<Raw>(
    `${SELECT_RUN}
       JOIN (SELECT r.id FROM event_runs r
               JOIN event_definitions d ON d.id = r.definition_id
              WHERE r.status = 'scheduled' AND ${GRACE_APPLIES}
                AND r.scheduled_for + INTERVAL d.grace_seconds SECOND < ?
              ORDER BY r.scheduled_for, r.id
              LIMIT ${n}) page ON page.id = r.id`,
    [now],
  )
  return sortRows(rows, 'oldest first').map(hydrate)
}

// A start claim also requires the run to be inside its grace window, so a run
// that should be `missed` can never be started by a sweeper that got there first.
// A grace-exempt run (backfilled, or held back by BUFFER_ONE) is never late.
const WITHIN_GRACE = `(grace_exempt = 1 OR scheduled_for + INTERVAL (SELECT d.grace_seconds FROM event_definitions d
     WHERE d.id = event_runs.definition_id) SECOND >= ?)`
// A run the schedule made starts only while its definition is active: a pause
// withdraws those runs in the transaction that pauses, and this guard keeps a
// claim that raced it from starting one anyway. Runs a person asked for start.
const SCHEDULE_ACTIVE = `(NOT (started_by <=> 'schedule') OR (SELECT d.state FROM event_definitions d
     WHERE d.id = event_runs.definition_id) = 'active')`

/** What an overlap policy decided for a run that came due while an earlier one of its scope was in progress. */
export type OverlapOutcome =
  /** SKIP: the run is now `missed`. */
  | { outcome: 'skipped'; holderId: number }
  /** BUFFER_ONE: the run is held (grace exempt) until the holder ends; `supersededId` went `missed` for it. */
  | { outcome: 'held'; holderId: number; supersededId: number | null }
  /** BUFFER_ONE: a newer occurrence is already held, so this older one is now `missed`. */
  | { outcome: 'superseded'; holderId: number; heldId: number }
  /** CANCEL_OTHER: the holder was cancelled and this run claimed. */
  | { outcome: 'cancelled'; cancelledId: number }

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
            started_at = COALESCE(started_at, NOW(3)), start_reserve = NULL
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
      { isolation: 'READ COMMITTED' },
    )
  } catch (err) {
    if (err instanceof KeyBlocked) return { claimed: false, blockedBy: err.holderId }
    if (err instanceof ClaimLost) {
      return { claimed: false, blockedBy: null }
    }
    // A deadlock or a duplicate between two claimers is a lost race, not a failure.
    if (isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK) || isDbErrno(err, DB_ERRNO.DUP_ENTRY)) {
      return { claimed: false, blockedBy: null }
    }
    throw err
  }
}

/** Take `key` for `runId` inside the claim's transaction; answers the live holder that blocks it, or null. */
async function takeKey(tx: Queryable, key: string, runId: number): Promise<number | null> {
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

async function inProgress(tx: Queryable, runId: number): Promise<boolean> {
  const [row] = await tx.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [runId])
  return row !== undefined && (KEY_HOLDING as readonly string[]).includes(String(row.status))
}

interface OverlapCandidate {
  id: number
  definitionId: number
  scope?: string
  scheduledFor?: Date
  overlap: 'skip' | 'buffer_one' | 'cancel_other'
}

/**
 * The overlap policy's decision for `run`, made under its (definition, scope)
 * lock row (inserted, or locked FOR UPDATE), so two instances can never both
 * decide that no earlier run is in progress. Null = the scope is free and the
 * lock is now `run`'s (the claim may go on); `cancelled` = the holder was
 * cancelled (CANCEL_OTHER) and the lock is `run`'s; anything else is final for
 * this attempt and commits as it is.
 */
async function takeOverlap(tx: Queryable, run: OverlapCandidate): Promise<OverlapOutcome | null> {
  const scope = run.scope ?? ''
  const where = 'definition_id = ? AND scope = ?'
  let holderId: number | null = null
  let heldId: number | null = null
  const ins = await tx.run(
    'INSERT IGNORE INTO overlap_locks (definition_id, scope, run_id) VALUES (?, ?, ?)',
    [run.definitionId, scope, run.id],
  )
  if (ins.affectedRows === 1) {
    // The first run of this scope under a policy: one that started before the
    // policy applied (on the set-wise path, without this lock) may be in progress.
    const [other] = await tx.execute<Raw>(
      `SELECT id FROM event_runs WHERE definition_id = ? AND scope = ? AND rehearsal = 0 AND id <> ?
          AND status IN (${placeholders(KEY_HOLDING.length)}) LIMIT 1`,
      [run.definitionId, scope, run.id, ...KEY_HOLDING],
    )
    if (other) {
      holderId = Number(other.id)
      await tx.run(`UPDATE overlap_locks SET run_id = ? WHERE ${where}`, [holderId, run.definitionId, scope])
    }
  } else {
    const [lock] = await tx.execute<Raw>(
      `SELECT run_id, held_run_id FROM overlap_locks WHERE ${where} FOR UPDATE`,
      [run.definitionId, scope],
    )
    if (!lock) throw new ClaimLost()
    heldId = lock.held_run_id == null ? null : Number(lock.held_run_id)
    const recorded = Number(lock.run_id)
    if (recorded !== run.id && (await inProgress(tx, recorded))) holderId = recorded
  }

  if (holderId === null) {
    // Free. An occurrence BUFFER_ONE held while the scope was busy goes first:
    // this one waits for it, then meets it in progress.
    if (heldId !== null && heldId !== run.id) {
      const [held] = await tx.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [heldId])
      if (held && String(held.status) === 'scheduled')
        return { outcome: 'held', holderId: heldId, supersededId: null }
    }
    await tx.run(
      `UPDATE overlap_locks SET run_id = ?, held_run_id = NULL, acquired_at = NOW(3) WHERE ${where}`,
      [run.id, run.definitionId, scope],
    )
    return null
  }

  switch (run.overlap) {
    case 'skip': {
      await moveScheduled(
        tx,
        run.id,
        'missed',
        `skipped: run ${holderId} of this definition and scope was still in progress (overlap policy SKIP)`,
      )
      return { outcome: 'skipped', holderId }
    }
    case 'buffer_one': {
      if (heldId === run.id) return { outcome: 'held', holderId, supersededId: null }
      let supersededId: number | null = null
      if (heldId !== null) {
        const [held] = await tx.execute<Raw>('SELECT status, scheduled_for FROM event_runs WHERE id = ?', [
          heldId,
        ])
        if (held && String(held.status) === 'scheduled') {
          const heldFor = (held.scheduled_for as Date).getTime()
          if (run.scheduledFor && run.scheduledFor.getTime() < heldFor) {
            // A newer occurrence is already held: this older one gives way.
            await moveScheduled(
              tx,
              run.id,
              'missed',
              `superseded: newer run ${heldId} is held until run ${holderId} ends (overlap policy BUFFER_ONE)`,
            )
            return { outcome: 'superseded', holderId, heldId }
          }
          await moveScheduled(
            tx,
            heldId,
            'missed',
            `superseded: newer run ${run.id} came due while run ${holderId} was still in progress (overlap policy BUFFER_ONE)`,
          )
          supersededId = heldId
        }
      }
      // Held: its grace window does not run while it waits.
      await tx.run(`UPDATE event_runs SET grace_exempt = 1 WHERE id = ? AND status = 'scheduled'`, [run.id])
      await tx.run(`UPDATE overlap_locks SET held_run_id = ? WHERE ${where}`, [
        run.id,
        run.definitionId,
        scope,
      ])
      return { outcome: 'held', holderId, supersededId }
    }
    case 'cancel_other': {
      const { sets, args } = transitionSets('cancelled', {
        error: `cancelled: newer run ${run.id} of this definition and scope came due (overlap policy CANCEL_OTHER)`,
      })
      await tx.run(
        `UPDATE event_runs SET ${sets.join(', ')} WHERE id = ? AND status IN (${placeholders(KEY_HOLDING.length)})`,
        [...args, holderId, ...KEY_HOLDING],
      )
      await tx.run(
        `UPDATE event_run_steps
            SET status = 'cancelled', ended_at = NOW(3), parked = 0, wake_at = NULL,
                claimed_by = NULL, claim_expires_at = NULL
          WHERE run_id = ? AND status IN ('pending','running')`,
        [holderId],
      )
      await releaseKey(tx, [holderId])
      await tx.run(
        `UPDATE overlap_locks SET run_id = ?, held_run_id = NULL, acquired_at = NOW(3) WHERE ${where}`,
        [run.id, run.definitionId, scope],
      )
      return { outcome: 'cancelled', cancelledId: holderId }
    }
  }
}

/** A guarded `scheduled → to` inside the claim's transaction. */
async function moveScheduled(tx: Queryable, id: number, to: 'missed', error: string): Promise<void> {
  const { sets, args } = transitionSets(to, { error })
  await tx.run(`UPDATE event_runs SET ${sets.join(', ')} WHERE id = ? AND status = 'scheduled'`, [
    ...args,
    id,
  ])
}

class KeyBlocked extends Error {
  constructor(readonly holderId: number) {
    super('concurrency key held')
  }
}

class ClaimLost extends Error {}

/**
 * Lock up to `limit` due, key-less, scheduled runs for the caller's start
 * transaction, oldest due first. `SKIP LOCKED` passes over runs another instance
 * is starting at this moment instead of waiting for them. The row locks are the
 * claim: held only until the caller's transaction commits, which moves every
 * run it starts on with {@link markStarted}, so no transaction outlives it.
 *
 * The grace window is the caller's to check: a locking read that joined the
 * definitions would lock their rows as well, and serialise every starter on them.
 */
export async function lockDueToStart(tx: Queryable, now: Date, limit: number): Promise<RunRow[]> {
  const n = clampLimit(limit, 100, 1, 5000)
  // Walk the due index in order and stop at the limit. A plan that sorted
  // instead (the optimiser's pick on a small table) would lock every due row it
  // read before sorting, and a second instance would then find nothing to start.
  const rows = await tx.query<Raw>(
    `${SELECT_RUN} FORCE INDEX (idx_evrun_wake)
      WHERE r.wake_at <= ? AND r.status = 'scheduled' AND r.concurrency_key IS NULL AND r.overlap IS NULL
      ORDER BY r.wake_at, r.id
      LIMIT ${n}
      FOR UPDATE SKIP LOCKED`,
    [now],
  )
  return rows.map(hydrate)
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
export async function markStarted(tx: Queryable, ids: readonly number[], as: StartedAs): Promise<number> {
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
  const { sets, args } = transitionSets(as.status, { phase: as.phase, ...(wakeAt && { wakeAt }) })
  sets.push('started_at = NOW(3)')
  if (claim) {
    sets.push('claimed_by = ?', 'claim_token = ?', `claim_expires_at = ${LEASE_EXPIRY}`)
    args.push(...claim)
  }
  const res = await tx.runQuery(
    `UPDATE event_runs SET ${sets.join(', ')}
      WHERE id IN (${placeholders(ids.length)}) AND status = 'scheduled'`,
    [...args, ...ids],
  )
  return res.affectedRows
}

/**
 * Lease a run already in flight so one tick works on it at a time; status is
 * unchanged. **A live lease is not re-enterable, not even by its owner**: a tick
 * that overran would otherwise advance one run twice at once. The lease also
 * moves `wake_at` to its expiry, so a crashed owner's run comes due by itself.
 */
export async function claimTick(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY}, claim_token = NULL, wake_at = ?
      WHERE id = ? AND status IN (${placeholders(IN_FLIGHT.length)}) AND ${leaseFree()}`,
    [owner, leaseMicros(leaseUntil, now), leaseUntil, id, ...IN_FLIGHT],
  )
  return res.affectedRows === 1
}

/** {@link claimTick} for up to `limit` due in-flight runs in one statement. */
export async function claimTickBatch(
  db: Queryable,
  owner: string,
  token: string,
  leaseUntil: Date,
  now: Date,
  limit: number,
): Promise<RunRow[]> {
  const n = clampLimit(limit, 100, 1, 5000)
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = ?, claim_token = ?, claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?
      WHERE wake_at <= ? AND status IN (${placeholders(IN_FLIGHT.length)}) AND ${leaseFree()}
      ORDER BY wake_at, id
      LIMIT ${n}`,
    [owner, token, leaseMicros(leaseUntil, now), leaseUntil, now, ...IN_FLIGHT],
  )
  if (res.affectedRows === 0) return []
  return findByClaimToken(db, token)
}

/** Runs claimed with one batch token (the second half of "claim many, read what you own"). */
export async function findByClaimToken(db: Queryable, token: string): Promise<RunRow[]> {
  const rows = await db.execute<Raw>(`${SELECT_RUN} WHERE r.claim_token = ? ORDER BY r.id`, [token])
  return rows.map(hydrate)
}

/** Push this caller's lease further out (before a long step); false if it lost the lease. */
export async function extendClaim(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_runs SET claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?
      WHERE id = ? AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseMicros(leaseUntil, now), leaseUntil, id, owner, ...IN_FLIGHT],
  )
  return res.affectedRows === 1
}

/**
 * Renew this caller's leases on `ids` and answer the ids it still holds. A
 * claim taken early in a long tick (many keyed runs to try, a slow database)
 * can expire before the tick gets to the run, and another instance may then
 * have taken the run over: only the runs answered here are still the caller's
 * to start and advance. Two statements, whatever the number of runs.
 */
export async function renewClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<Set<number>> {
  if (ids.length === 0) return new Set()
  await db.runQuery(
    `UPDATE event_runs SET claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?
      WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseMicros(leaseUntil, now), leaseUntil, ...ids, owner, ...IN_FLIGHT],
  )
  const rows = await db.query<Raw>(
    `SELECT id FROM event_runs WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ?`,
    [...ids, owner],
  )
  return new Set(rows.map((r) => Number(r.id)))
}

/**
 * Give a run back. Scoped to `claimed_by = owner`: a process releases only its
 * own claim. `wakeAt` says when the run next needs the runner: now (the default)
 * to pick it up at once, a timer's end, or null for a run parked on a cue. A run
 * parked or waiting carries no lease: otherwise every wait would last
 * max(wait, lease).
 */
export async function releaseClaim(
  db: Queryable,
  id: number,
  owner: string,
  opts: { wakeAt?: Date | null } = {},
): Promise<boolean> {
  const wake = opts.wakeAt === undefined ? new Date() : opts.wakeAt
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE id = ? AND claimed_by = ?`,
    [...IN_FLIGHT, wake, id, owner],
  )
  return res.affectedRows === 1
}

/** {@link releaseClaim} for many runs with one wake time. */
export async function releaseClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  wakeAt: Date | null,
): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ?`,
    [...IN_FLIGHT, wakeAt, ...ids, owner],
  )
  return res.affectedRows
}

/** Release every claim `owner` holds (a stopping runner), in-flight runs due again at `now` (the runner's clock); answers how many. */
export async function releaseAllClaims(db: Queryable, owner: string, now: Date): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE claimed_by = ?`,
    [...IN_FLIGHT, now, owner],
  )
  return res.affectedRows
}

/**
 * Wake a run now (a cue resolved, a step skipped), unless it is paused or terminal.
 *
 * `now` is the caller's clock (the one the runner compares `wake_at` with).
 * Without it the database's NOW(3) is used; but a database clock ahead of the
 * runner's by X would hold every resolved cue back by X (with a test clock,
 * forever), so callers that have a clock pass it.
 */
export async function wakeNow(db: Queryable, id: number, now?: Date): Promise<boolean> {
  const at = now ?? null
  const res = await db.run(
    `UPDATE event_runs SET wake_at = COALESCE(?, NOW(3))
      WHERE id = ? AND status IN (${placeholders(IN_FLIGHT.length)})
        AND (wake_at IS NULL OR wake_at > COALESCE(?, NOW(3))) AND claimed_by IS NULL`,
    [at, id, ...IN_FLIGHT, at],
  )
  return res.affectedRows === 1
}

/**
 * Hold a blocked scheduled run back until `until`, so runs waiting on a key
 * rotate behind newly due ones instead of occupying the head of the due index.
 */
export async function deferStart(db: Queryable, id: number, until: Date): Promise<boolean> {
  const res = await db.run(`UPDATE event_runs SET wake_at = ? WHERE id = ? AND status = 'scheduled'`, [
    until,
    id,
  ])
  return res.affectedRows === 1
}

/**
 * Release leases whose owner did not come back. **It changes no status and no
 * counter**: the run stays where it was and the next tick picks it up. A sweep
 * that reset rows to their start state once made an attempt ceiling unreachable,
 * so a row cycled forever and never became eligible for retention.
 */
export async function reclaimStale(db: Queryable): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL
      WHERE status IN (${placeholders(IN_FLIGHT.length)})
        AND claim_expires_at IS NOT NULL AND claim_expires_at < NOW(3)`,
    [...IN_FLIGHT],
  )
  return res.affectedRows
}
