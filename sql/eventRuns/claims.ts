/**
 * The runner's leases on in-flight runs (due runs are found in due.ts):
 * taking ownership with compare-and-set UPDATEs (`affectedRows = 1` is
 * ownership; no transaction is held open while the work happens), extending,
 * renewing, releasing and reclaiming them.
 *
 * In-flight runs are claimed through `wake_at`, which is NULL or in the future
 * for every run parked on a cue, waiting out a timer or leased, so idle runs
 * leave the index and cannot starve new ones. Key-less scheduled runs have no
 * `wake_at` either (migration 0030): they are started from the due index
 * (status, scheduled_for) under row locks (startLock.ts); runs with a
 * concurrency key or an overlap policy start by their own claims
 * (claimStart.ts).
 *
 * Clocks: a lease's expiry is set and compared on the database's clock
 * (`NOW(3)`, see sql/leases.ts), so instances with skewed clocks cannot take
 * over each other's live leases; due times (`wake_at`, the `now` passed in)
 * stay on the runner's clock. A function that sets a lease takes `leaseUntil`
 * and `now` from the runner's clock: `leaseUntil` becomes `wake_at` (a crashed
 * owner's run comes due by itself) and `leaseUntil - now` the lease's length.
 */

import { type Queryable, runEach, type Statement } from '../db.ts'
import { caseOf, chunkCase, clampLimit, idSet, placeholders } from '../json.ts'
import { LEASE_EXPIRY, leaseFree, leaseMicros } from '../leases.ts'
import { IN_FLIGHT } from '../states.ts'
import {
  DEFINITION_NAME_COLUMNS,
  hydrateWithDefinition,
  type Raw,
  RUN_COLUMNS,
  type RunWithDefinition,
} from './rows.ts'
import { DROP_CLAIM } from './transitions.ts'

/**
 * Lease up to `limit` due in-flight runs so one tick works on each at a time;
 * status is unchanged. **A live lease is not re-enterable, not even by its
 * owner**: a tick that overran would otherwise advance one run twice at once
 * (the lease's expiry is judged on the database's clock). The lease also moves
 * `wake_at` to its expiry, so a crashed owner's run comes due by itself.
 */
export async function claimTickBatch(
  db: Queryable,
  owner: string,
  token: string,
  leaseUntil: Date,
  now: Date,
  limit: number,
): Promise<LeasedRun[]> {
  return leaseDueThenRead(
    db,
    { owner, token, leaseUntil, now, limit },
    { read: (range) => findLeased(db, token, leaseUntil, range), count: (found) => found.length, none: [] },
  )
}

/** A lease of due runs: by whom, under which token, until when, how many. */
export interface DueLease {
  owner: string
  token: string
  leaseUntil: Date
  now: Date
  limit: number
  /**
   * Lease runs due by this instant rather than by `now` (a timer's end claimed
   * a moment ahead, src/runner/wakeLane.ts). Only what is due moves: a live
   * lease is still judged by the database's clock, never by this instant.
   */
  dueBy?: Date
}

/**
 * Lease up to `limit` due in-flight runs under `token`, then read them with
 * `read`: the range `wake_at = leaseUntil` first; when that finds fewer than
 * were leased (a run woken in between: a cue answered, wakeNow moved its
 * wake_at earlier, it stays leased), every leased run at or before the
 * lease's expiry. `none` when nothing was leased. {@link claimTickBatch}
 * reads the runs, the wake lane's claim (claimsWithSteps.ts) their next
 * steps with them.
 */
export async function leaseDueThenRead<T>(
  db: Queryable,
  lease: DueLease,
  how: { read: (range: '=' | '<=') => Promise<T>; count: (found: T) => number; none: T },
): Promise<T> {
  const { owner, token, leaseUntil, now, limit } = lease
  // Due by `now` unless the caller claims ahead; the lease's length still counts from now.
  const dueBy = lease.dueBy && lease.dueBy > now ? lease.dueBy : now
  const n = clampLimit(limit, 100, 1, 5000)
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = ?, claim_token = ?, claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?
      WHERE wake_at <= ? AND status IN (${placeholders(IN_FLIGHT.length)}) AND ${leaseFree()}
      ORDER BY wake_at, id
      LIMIT ${n}`,
    [owner, token, leaseMicros(leaseUntil, now), leaseUntil, dueBy, ...IN_FLIGHT],
  )
  if (res.affectedRows === 0) return how.none
  const found = await how.read('=')
  if (how.count(found) >= res.affectedRows) return found
  return how.read('<=')
}

/** A run as {@link claimTickBatch} read it: with its definition's title and slug, which the steps' templates use. */
export type LeasedRun = RunWithDefinition

/**
 * Runs leased with one batch token (the second half of "lease many, read what
 * you leased"), with their definitions' titles: the runner advances them as
 * read, with no second read for the titles (one statement fewer between a
 * cue's answer and its run's next step). The lease set every one's `wake_at` to `leaseUntil`, so they
 * are the range `wake_at = leaseUntil` of idx_evrun_wake, the token picking
 * them out of any other run due at that same instant: claim_token has no index
 * (migration 0018), so claiming and giving back rewrite none. Should a run be
 * woken between the lease and this read, `<=` reads the in-flight runs due by
 * the lease's expiry instead (never the history: a finished run's wake_at is
 * NULL). A run paused in between (wake_at NULL) is not read; it does not
 * advance while paused anyway, and its lease runs out.
 */
export async function findLeased(
  db: Queryable,
  token: string,
  leaseUntil: Date,
  by: '=' | '<=' = '=',
): Promise<LeasedRun[]> {
  const rows = await db.execute<Raw>(
    `SELECT ${RUN_COLUMNS}, ${DEFINITION_NAME_COLUMNS}
       FROM event_runs r FORCE INDEX (idx_evrun_wake) JOIN event_definitions d ON d.id = r.definition_id
      WHERE r.wake_at ${by} ? AND r.claim_token = ? ORDER BY r.id`,
    [leaseUntil, token],
  )
  return rows.map(hydrateWithDefinition)
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
 * to start and advance. One statement when every run is still the caller's
 * (the count of rows it matched says so: mysql2 asks for found rows, as
 * `extendClaim` relies on too), a second to find which when some are not.
 */
export async function renewClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<Set<number>> {
  if (ids.length === 0) return new Set()
  const which = idSet('id', ids)
  const renewed = await db.runQuery(
    `UPDATE event_runs SET claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?
      WHERE ${which.sql} AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseMicros(leaseUntil, now), leaseUntil, ...which.args, owner, ...IN_FLIGHT],
  )
  const asked = new Set(ids)
  if (renewed.affectedRows === asked.size) return asked
  const rows = await db.query<Raw>(`SELECT id FROM event_runs WHERE ${which.sql} AND claimed_by = ?`, [
    ...which.args,
    owner,
  ])
  return new Set(rows.map((r) => Number(r.id)))
}

/**
 * Keep `ids`' claims alive while this caller still holds them: each lease runs
 * at least until `leaseUntil` (never shortened: a round may have lengthened it
 * to its longest step's timeout), and `wake_at`, where a crashed holder's run
 * comes due again, with it. A run a person woke meanwhile keeps its early
 * `wake_at` for the release ({@link releasedWakeAt}). A claim that already ran
 * out and was taken by another owner is left alone. Answers how many are still
 * the caller's (the rows matched: mysql2 asks for found rows).
 */
export async function keepClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<number> {
  if (ids.length === 0) return 0
  const which = idSet('id', ids)
  const res = await db.runQuery(
    `UPDATE event_runs
        SET claim_expires_at = GREATEST(COALESCE(claim_expires_at, NOW(3)), ${LEASE_EXPIRY}),
            wake_at = IF(woken_while_claimed = 1, wake_at, GREATEST(COALESCE(wake_at, ?), ?))
      WHERE ${which.sql} AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseMicros(leaseUntil, now), leaseUntil, leaseUntil, ...which.args, owner, ...IN_FLIGHT],
  )
  return res.affectedRows
}

/**
 * A person acting on a claimed run (a cue resolved, a step skipped) pulls its
 * `wake_at` earlier and marks it `woken_while_claimed` ({@link wakeNow}); the
 * release then keeps that earlier instant instead of overwriting it with the
 * holder's own plan, made before the person acted (otherwise a cue answered
 * while its runner was still parking it would sleep until the cue's timeout),
 * and clears the mark. Assigned in this order: MariaDB evaluates SET left to
 * right.
 */
function releasedWakeAt(planned = '?'): string {
  return `wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}),
              IF(woken_while_claimed = 1, LEAST(wake_at, COALESCE(${planned}, wake_at)), ${planned}), wake_at),
            woken_while_claimed = 0`
}

/**
 * Give a run back. Scoped to `claimed_by = owner`: a process releases only its
 * own claim. `wakeAt` says when the run next needs the runner: now (the default)
 * to pick it up at once, a timer's end, or null for a run parked on a cue. A run
 * parked or waiting carries no lease: otherwise every wait would last
 * max(wait, lease). A wake someone asked for while the run was claimed stands.
 */
export async function releaseClaim(
  db: Queryable,
  id: number,
  owner: string,
  opts: { wakeAt?: Date | null } = {},
): Promise<boolean> {
  return (await releaseClaims(db, [id], owner, opts.wakeAt === undefined ? new Date() : opts.wakeAt)) === 1
}

/** {@link releaseClaim} for many runs with one wake time. */
export async function releaseClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  wakeAt: Date | null,
): Promise<number> {
  if (ids.length === 0) return 0
  const which = idSet('id', ids)
  const res = await db.runQuery(
    `UPDATE event_runs
        SET ${releasedWakeAt()}, ${DROP_CLAIM}
      WHERE ${which.sql} AND claimed_by = ?`,
    [...IN_FLIGHT, wakeAt, wakeAt, ...which.args, owner],
  )
  return res.affectedRows
}

/**
 * {@link releaseClaim} for many runs, each with its own wake time (a batch whose
 * runs went to sleep on timers, parked on cues or wait out retries): one UPDATE
 * per few hundred runs, with the same rules.
 */
export async function releaseClaimsAt(
  db: Queryable,
  rows: readonly { id: number; wakeAt: Date | null }[],
  owner: string,
): Promise<number> {
  return runEach(db, releaseClaimsAtStatements(rows, owner))
}

/**
 * {@link releaseClaimsAt} as statements for a transaction. With `token` (the
 * claim's token; null for a claim taken without one), a run is given back
 * only while that same claim is on it: a transaction sent again after its
 * answer was lost must not give back a claim taken since (a GO's hand-over
 * to this same instance, sql/eventRuns/handOff.ts, carries a token of its own).
 */
export function releaseClaimsAtStatements(
  rows: readonly { id: number; wakeAt: Date | null }[],
  owner: string,
  token?: string | null,
): Statement[] {
  const [guard, tokenArgs] = token === undefined ? ['', []] : [' AND claim_token <=> ?', [token]]
  return chunkCase(rows).map((chunk) => {
    const planned = caseOf(
      'id',
      chunk.map((r) => [r.id, r.wakeAt] as const),
    )
    const which = idSet(
      'id',
      chunk.map((r) => r.id),
    )
    return {
      sql: `UPDATE event_runs
          SET ${releasedWakeAt(planned.sql)}, ${DROP_CLAIM}
        WHERE ${which.sql} AND claimed_by = ?${guard}`,
      params: [...IN_FLIGHT, ...planned.args, ...planned.args, ...which.args, owner, ...tokenArgs],
    }
  })
}

/** Release every claim `owner` holds (a stopping runner), in-flight runs due again at `now` (the runner's clock); answers how many. */
export async function releaseAllClaims(db: Queryable, owner: string, now: Date): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs
        SET ${DROP_CLAIM}, woken_while_claimed = 0,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE claimed_by = ?`,
    [...IN_FLIGHT, now, owner],
  )
  return res.affectedRows
}

/**
 * Wake a run now (a cue resolved, a step skipped), unless it is paused or terminal.
 * A run that is claimed at this moment gets the earlier `wake_at` too, marked
 * so that its holder's release keeps it (see {@link releaseClaim}); another
 * instance cannot take the run meanwhile, its lease being live.
 *
 * `now` is the caller's clock (the one the runner compares `wake_at` with).
 * Without it the database's NOW(3) is used; but a database clock ahead of the
 * runner's by X would hold every resolved cue back by X (with a test clock,
 * forever), so callers that have a clock pass it.
 */
export async function wakeNow(db: Queryable, id: number, now?: Date): Promise<boolean> {
  const st = wakeNowStatement(id, now)
  const res = await db.run(st.sql, st.params)
  return res.affectedRows === 1
}

/**
 * {@link wakeNow} as a statement for a batch. With `unlessToken`, a run
 * whose claim carries that token is left alone: the batch claimed it a
 * statement before (`claimAnsweredStatement`), and that claim is its wake.
 */
export function wakeNowStatement(id: number, now?: Date, unlessToken?: string): Statement {
  const at = now ?? null
  const guard = unlessToken === undefined ? '' : ' AND NOT (claim_token <=> ?)'
  return {
    sql: `UPDATE event_runs SET wake_at = COALESCE(?, NOW(3)), woken_while_claimed = claimed_by IS NOT NULL
      WHERE id = ? AND status IN (${placeholders(IN_FLIGHT.length)})
        AND (wake_at IS NULL OR wake_at > COALESCE(?, NOW(3)))${guard}`,
    params: [at, id, ...IN_FLIGHT, at, ...(unlessToken === undefined ? [] : [unlessToken])],
  }
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
    `UPDATE event_runs SET ${DROP_CLAIM}
      WHERE status IN (${placeholders(IN_FLIGHT.length)})
        AND claim_expires_at IS NOT NULL AND claim_expires_at < NOW(3)`,
    [...IN_FLIGHT],
  )
  return res.affectedRows
}
