/**
 * The moves a step makes. Every move is guarded on the step's current state
 * and answers whether it happened, so a person's `skipStep` racing the
 * runner's `complete` has one winner and the loser learns it. A move the
 * runner makes for one step or for a batch is written once, set-wise, and the
 * one-step form calls it.
 */
import { type Queryable, runEach, type Statement } from '../db.ts'
import { caseOf, chunkCase, placeholders, toJson } from '../json.ts'
import { LEASE_EXPIRY, leaseFree, leaseMicros } from '../leases.ts'
import { KEY_HOLDING } from '../states.ts'
import type { Raw, StepRow } from './rows.ts'

/**
 * Begin an attempt: the step becomes `running` with this owner's lease and one
 * more attempt. Allowed from `pending` (first attempt, or a retry whose backoff
 * ended) and from an executing step whose owner's lease is gone (a crash: the
 * step runs again, at least once). Refused for parked or sleeping steps (see
 * {@link resume}), done steps, and a step under another owner's live lease.
 */
export async function begin(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  return (await beginMany(db, [id], owner, leaseUntil, now)) === 1
}

/**
 * Undo a {@link begin} whose answer was lost: put the step back exactly as it
 * was read before (`before`), but only if the row is still just what that
 * begin wrote (running, one more attempt, still this owner's: a reclaim or
 * another begin would have changed one of them), so nothing that happened
 * since is undone. Answers whether it was put back;
 * false also when the begin never committed.
 */
export async function takeBackBegin(db: Queryable, before: StepRow, owner: string): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = ?, attempts = ?, claimed_by = ?, claim_expires_at = ?, started_at = ?, wake_at = ?, parked = ?
      WHERE id = ? AND status = 'running' AND attempts = ? AND claimed_by = ?`,
    [
      before.status,
      before.attempts,
      before.claimedBy,
      before.claimExpiresAt,
      before.startedAt,
      before.wakeAt,
      before.parked ? 1 : 0,
      before.id,
      before.attempts + 1,
      owner,
    ],
  )
  return res.affectedRows === 1
}

/**
 * Undo {@link beginMany} and {@link resumeMany} whose answers were lost,
 * before any of those steps ran: the first attempts go back to `pending` with
 * no attempt counted, the resumed ones to their timer with no lease, each only
 * if the row is still just what that statement wrote (this owner's, and for a
 * first attempt, attempt 1). Answers how many were put back.
 */
export async function takeBackEntered(
  db: Queryable,
  begun: readonly number[],
  resumed: readonly number[],
  owner: string,
): Promise<number> {
  let put = 0
  if (begun.length > 0) {
    const res = await db.runQuery(
      `UPDATE event_run_steps
          SET status = 'pending', attempts = 0, claimed_by = NULL, claim_expires_at = NULL, started_at = NULL,
              wake_at = NULL, parked = 0
        WHERE id IN (${placeholders(begun.length)}) AND status = 'running' AND attempts = 1 AND claimed_by = ?`,
      [...begun, owner],
    )
    put += res.affectedRows
  }
  if (resumed.length > 0) {
    const res = await db.runQuery(
      `UPDATE event_run_steps SET claimed_by = NULL, claim_expires_at = NULL
        WHERE id IN (${placeholders(resumed.length)}) AND status = 'running' AND wake_at IS NOT NULL
          AND claimed_by = ?`,
      [...resumed, owner],
    )
    put += res.affectedRows
  }
  return put
}

/**
 * The step's run still advances (`running` or `ending`), as of the statement
 * that enters the step: a pause or a cancel that lands after the runner read
 * the run's status (a claim made ahead of a timer, a round's read) keeps the
 * step from starting, instead of being seen only at the next round.
 */
const RUN_ADVANCING = `EXISTS (SELECT 1 FROM event_runs r
  WHERE r.id = event_run_steps.run_id AND r.status IN ('running', 'ending'))`

/**
 * {@link begin} for many steps at once (a batch of runs, or a batch of one):
 * first attempts, retries whose backoff has ended, and steps whose executing
 * owner's lease is gone; answers how many began. `now` stamps `started_at`
 * (only a first start), from the runner's clock: `core.wait {seconds}` and cue
 * timeouts count from it and compare with the runner's clock, so both ends
 * must come from the same clock. The lease is on the database's (sql/leases.ts).
 * A step of a run no longer advancing (paused, cancelled) does not begin.
 */
export async function beginMany(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_run_steps
        SET status = 'running', attempts = attempts + 1, claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY},
            started_at = COALESCE(started_at, ?), wake_at = NULL, parked = 0
      WHERE id IN (${placeholders(ids.length)})
        AND ((status = 'pending' AND (wake_at IS NULL OR wake_at <= ?))
             OR (status = 'running' AND parked = 0 AND wake_at IS NULL))
        AND ${leaseFree()} AND ${RUN_ADVANCING}`,
    [owner, leaseMicros(leaseUntil, now), now, ...ids, now],
  )
  return res.affectedRows
}

/**
 * Re-enter a sleeping step (its timer came due) or a parked one (its timeout
 * passed) without spending an attempt: a timer coming due is not a retry.
 * `wake_at` is kept until the step completes, so a crash here re-enters again.
 */
export async function resume(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  return (await resumeMany(db, [id], owner, leaseUntil, now)) === 1
}

/**
 * {@link resume} for many steps at once (a batch of runs whose timers came due
 * together); answers how many were re-entered. The same guard, row by row,
 * and the same rule for a run no longer advancing.
 */
export async function resumeMany(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_run_steps
        SET claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY}, parked = 0
      WHERE id IN (${placeholders(ids.length)}) AND status = 'running' AND wake_at IS NOT NULL AND wake_at <= ?
        AND ${leaseFree()} AND ${RUN_ADVANCING}`,
    [owner, leaseMicros(leaseUntil, now), ...ids, now],
  )
  return res.affectedRows
}

/** `running → completed` with its result; guarded, so a skip that won is kept. */
export async function complete(db: Queryable, id: number, result: unknown): Promise<boolean> {
  return (await completeMany(db, [{ id, result }])) === 1
}

/**
 * {@link complete} for many steps at once (a batch's outcomes), each with its
 * own result: one UPDATE per few hundred steps, with the same guard. Results
 * all empty (log lines, most custom kinds) need no `CASE`.
 */
export async function completeMany(
  db: Queryable,
  rows: readonly { id: number; result: unknown }[],
): Promise<number> {
  return runEach(db, completeManyStatements(rows))
}

/** {@link completeMany} as statements for a batch, one per chunk of rows. */
export function completeManyStatements(rows: readonly { id: number; result: unknown }[]): Statement[] {
  return chunkCase(rows).map((chunk) => {
    const answered = chunk.some((r) => r.result !== null && r.result !== undefined)
    const result = answered
      ? caseOf(
          'id',
          chunk.map((r) => [r.id, toJson(r.result)] as const),
        )
      : { sql: 'NULL', args: [] }
    return {
      sql: `UPDATE event_run_steps
          SET status = 'completed', result = ${result.sql}, ended_at = NOW(3), claimed_by = NULL,
              claim_expires_at = NULL, parked = 0, wake_at = NULL, last_error = NULL
        WHERE id IN (${placeholders(chunk.length)}) AND status = 'running'`,
      params: [...result.args, ...chunk.map((r) => r.id)],
    }
  })
}

/**
 * {@link sleep} or {@link park} for many steps at once, each with its own wake
 * time (`until`; null parks a cue with no timeout). Guarded like the single
 * moves: a step a person skipped meanwhile stays skipped.
 */
export async function setAsideMany(
  db: Queryable,
  rows: readonly { id: number; until: Date | null; parked: boolean }[],
): Promise<number> {
  return runEach(db, setAsideManyStatements(rows))
}

/** {@link setAsideMany} as statements for a batch, one per chunk of rows. */
export function setAsideManyStatements(
  rows: readonly { id: number; until: Date | null; parked: boolean }[],
): Statement[] {
  return chunkCase(rows).map((chunk) => {
    const wake = caseOf(
      'id',
      chunk.map((r) => [r.id, r.until] as const),
    )
    const parked = caseOf(
      'id',
      chunk.map((r) => [r.id, r.parked ? 1 : 0] as const),
    )
    return {
      sql: `UPDATE event_run_steps
          SET parked = ${parked.sql}, wake_at = ${wake.sql}, claimed_by = NULL, claim_expires_at = NULL
        WHERE id IN (${placeholders(chunk.length)}) AND status = 'running'`,
      params: [...parked.args, ...wake.args, ...chunk.map((r) => r.id)],
    }
  })
}

/** Park on a person: `running`, `parked = 1`, no lease; `until` is the cue's timeout. */
export async function park(db: Queryable, id: number, until: Date | null): Promise<boolean> {
  return (await setAsideMany(db, [{ id, until, parked: true }])) === 1
}

/** A durable timer: `running`, not parked, no lease, due at `until`. */
export async function sleep(db: Queryable, id: number, until: Date): Promise<boolean> {
  return (await setAsideMany(db, [{ id, until, parked: false }])) === 1
}

/**
 * A failed attempt with attempts left: back to `pending` until `wakeAt`, keeping
 * the error. `pending` with attempts > 0 and a wake_at is "in backoff".
 */
export async function scheduleRetry(
  db: Queryable,
  id: number,
  error: string,
  wakeAt: Date,
): Promise<boolean> {
  return (await failAttempts(db, [{ id, error, retryAt: wakeAt }])) === 1
}

/**
 * A person's "retry now" for a step in backoff (pending, at least one attempt
 * made, its next attempt still ahead): its next attempt is due at `now`.
 * Nothing else changes; the runner's normal path begins the attempt (an
 * attempt counted, the same idempotency key). Guarded, so a skip, a cancel or
 * the runner's own begin that got there first is kept; answers whether it moved.
 */
export async function retryNow(db: Queryable, id: number, now: Date): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET wake_at = ?
      WHERE id = ? AND status = 'pending' AND attempts > 0 AND wake_at > ?`,
    [now, id, now],
  )
  return res.affectedRows === 1
}

/**
 * {@link scheduleRetry} and {@link fail} for many steps at once (a batch's
 * failed attempts), each with its own error (and, for a retry, its own wake
 * time), guarded the same way. Answers how many moved.
 */
export async function failAttempts(
  db: Queryable,
  rows: readonly { id: number; error: string; retryAt: Date | null }[],
): Promise<number> {
  return runEach(db, failAttemptsStatements(rows))
}

/** {@link failAttempts} as statements for a batch, one per chunk of rows. */
export function failAttemptsStatements(
  rows: readonly { id: number; error: string; retryAt: Date | null }[],
): Statement[] {
  return chunkCase(rows).map((chunk) => {
    const error = caseOf(
      'id',
      chunk.map((r) => [r.id, r.error.slice(0, 1000)] as const),
    )
    const wake = caseOf(
      'id',
      chunk.map((r) => [r.id, r.retryAt] as const),
    )
    const retrying = chunk.filter((r) => r.retryAt !== null).map((r) => r.id)
    const inRetry = retrying.length > 0 ? `id IN (${placeholders(retrying.length)})` : 'FALSE'
    // Assigned left to right (MariaDB): `status` last, since the others read the old row.
    return {
      sql: `UPDATE event_run_steps
          SET last_error = ${error.sql}, wake_at = ${wake.sql},
              ended_at = IF(${inRetry}, ended_at, NOW(3)),
              claimed_by = NULL, claim_expires_at = NULL, parked = 0,
              status = IF(${inRetry}, 'pending', 'failed')
        WHERE id IN (${placeholders(chunk.length)}) AND status = 'running'`,
      params: [...error.args, ...wake.args, ...retrying, ...retrying, ...chunk.map((r) => r.id)],
    }
  })
}

/**
 * `running → pending` for an attempt its runner cut short while shutting down:
 * the attempt is taken back (not counted against the step's retries) and the
 * step is due again at `wakeAt`.
 */
export async function interrupt(db: Queryable, id: number, reason: string, wakeAt: Date): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET status = 'pending', attempts = GREATEST(attempts, 1) - 1, last_error = ?,
            wake_at = ?, claimed_by = NULL, claim_expires_at = NULL, parked = 0
      WHERE id = ? AND status = 'running'`,
    [reason.slice(0, 1000), wakeAt, id],
  )
  return res.affectedRows === 1
}

/** `running → failed`: the attempts are spent or the failure is not retryable. */
export async function fail(db: Queryable, id: number, error: string): Promise<boolean> {
  return (await failAttempts(db, [{ id, error, retryAt: null }])) === 1
}

/**
 * A person resolves a cue with a ladder: `running → completed`, parked or not.
 * A cue is briefly unparked while the runner re-enters it at a rung of its
 * ladder; an answer then must not be turned away. Whatever the runner writes
 * after the re-entry is guarded on `running`, so the answer stands.
 */
export async function resolveCue(db: Queryable, id: number, result: unknown): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'completed', result = ?, ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status = 'running' AND kind = 'core.cue'`,
    [toJson(result), id],
  )
  return res.affectedRows === 1
}

/** A person resolves a parked cue: `running, parked → completed`. */
export async function resolveParked(db: Queryable, id: number, result: unknown): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'completed', result = ?, ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status = 'running' AND parked = 1`,
    [toJson(result), id],
  )
  return res.affectedRows === 1
}

/** A person skips a step that has not finished (pending, sleeping, parked or executing). */
export async function skip(db: Queryable, id: number, reason: string | null): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'skipped', result = ?, ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status IN ('pending','running')`,
    [toJson(reason === null ? null : { reason }), id],
  )
  return res.affectedRows === 1
}

/**
 * Skip a new run's steps before `seq`, each with `result`: a retry that goes
 * on from a later step (the original run already did these).
 */
export async function skipBefore(
  db: Queryable,
  runId: number,
  seq: number,
  result: unknown,
): Promise<number> {
  const res = await db.run(
    `UPDATE event_run_steps SET status = 'skipped', result = ?, ended_at = NOW(3)
      WHERE run_id = ? AND seq < ? AND status = 'pending'`,
    [toJson(result), runId, seq],
  )
  return res.affectedRows
}

/** Cancel every unfinished step of a run (the run was cancelled or failed). */
export async function cancelUnfinished(db: Queryable, runId: number): Promise<number> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'cancelled', ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE run_id = ? AND status IN ('pending','running')`,
    [runId],
  )
  return res.affectedRows
}

/** {@link cancelUnfinished} for many runs in one statement (a bulk cancel's batch). */
export async function cancelUnfinishedOfRuns(db: Queryable, runIds: readonly number[]): Promise<number> {
  if (runIds.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_run_steps
        SET status = 'cancelled', ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE run_id IN (${runIds.map(() => '?').join(', ')}) AND status IN ('pending','running')`,
    [...runIds],
  )
  return res.affectedRows
}

/**
 * Release step leases whose owner did not come back. Like the run reclaim it
 * changes no status and no attempt counter: the step is executed again by the
 * next owner (at-least-once), under the same idempotency key.
 */
export async function reclaimStale(db: Queryable): Promise<number> {
  // Find them from the runs that can hold a step lease (the status index's live
  // ranges) and their steps, not from the steps table: every finished run's
  // steps are in it, and no index of steps serves a lease range. A step of a
  // terminal run holds no lease (ending a run ends its steps). A plain read
  // first: an UPDATE joining the runs would lock every in-flight run's row and
  // index gap, on every tick of every instance, against their claims.
  const stale = await db.execute<Raw>(
    `SELECT s.id FROM event_runs r STRAIGHT_JOIN event_run_steps s ON s.run_id = r.id
      WHERE r.status IN (${placeholders(KEY_HOLDING.length)})
        AND s.status = 'running' AND s.claim_expires_at IS NOT NULL AND s.claim_expires_at < NOW(3)`,
    [...KEY_HOLDING],
  )
  if (stale.length === 0) return 0
  const ids = stale.map((r) => Number(r.id))
  const res = await db.runQuery(
    `UPDATE event_run_steps SET claimed_by = NULL, claim_expires_at = NULL
      WHERE id IN (${placeholders(ids.length)}) AND status = 'running' AND claim_expires_at < NOW(3)`,
    [...ids],
  )
  return res.affectedRows
}
