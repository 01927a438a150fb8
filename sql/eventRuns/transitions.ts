/**
 * Guarded status moves of `event_runs`. Every move is `from → to` and reports
 * whether it happened; `false` is not an error (another worker, or an admin's
 * cancel, won the race). A move into a terminal status stamps `ended_at`, drops
 * the claim and releases the run's concurrency key. Health and phase changes
 * are guarded on the current value, so an unchanged value restamps nothing.
 */

import { type BatchAnswer, type Db, type Queryable, runEach, type SqlValue, type Statement } from '../db.ts'
import { cancelUnfinished, fail as failStep } from '../eventSteps/index.ts'
import { idSet, placeholders } from '../json.ts'
import {
  type AlertOwed,
  alertForHealth,
  alertForStatus,
  newAlertStamp,
  runAlertStatements,
} from '../notifications/runAlerts.ts'
import type { RunHealth, RunStatus } from '../states.ts'
import { isTerminal, KEY_HOLDING, TERMINAL } from '../states.ts'

/** Options of {@link transition}. */
export interface TransitionOptions {
  /** Set `current_phase`. */
  phase?: string | null
  /** Set `last_error` (truncated to 1000 characters); null clears it. */
  error?: string | null
  /** Drop the claim even for a non-terminal move. */
  clearClaim?: boolean
  /** Set `wake_at` (a terminal or paused target clears it regardless). */
  wakeAt?: Date | null
  /**
   * Move only a run with work left: a step not yet finished, or no steps yet.
   * A pause or a cancel of a run whose last step is done loses (the runner
   * completes it), so a person never pauses or cancels finished work.
   */
  onlyWithStepsLeft?: boolean
  /**
   * The instant of a move into `paused` (the mover's clock), kept in
   * `paused_at` so the resume can hold the show's time (pauseHold.ts). Every
   * other move clears it.
   */
  pausedAt?: Date
}

/** The guard of {@link TransitionOptions.onlyWithStepsLeft}, on `event_runs` rows. */
export const STEPS_LEFT = `(EXISTS (SELECT 1 FROM event_run_steps s WHERE s.run_id = event_runs.id AND s.status IN ('pending','running'))
        OR NOT EXISTS (SELECT 1 FROM event_run_steps s WHERE s.run_id = event_runs.id))`

/** The SET clause that gives a claim up: owner, lease and batch token together. */
export const DROP_CLAIM = 'claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL'

/**
 * The SET clauses of a move into `to`, and the run alert the move owes (see
 * runAlerts.ts): when `owed` is set, the statement stamps its rows with it and
 * the caller must send {@link alertStatementsFor} after it, in its transaction.
 */
export function transitionSets(
  to: RunStatus,
  opts: TransitionOptions,
): { sets: string[]; args: SqlValue[]; owed: AlertOwed | null } {
  // Every status move hands back the row's start reserve (migration 0003): the
  // first one, out of `scheduled`, is the one that grows the row. It also
  // drops `missed_at`, the grace deadline, which only a `scheduled` run has
  // (no index holds it since migration 0020, so this writes no index entry).
  const sets = ['status = ?', 'start_reserve = NULL', 'missed_at = NULL']
  const args: SqlValue[] = [to]
  if (opts.phase !== undefined) {
    sets.push('current_phase = ?')
    args.push(opts.phase)
  }
  if (opts.error !== undefined) {
    sets.push('last_error = ?')
    args.push(opts.error === null ? null : String(opts.error).slice(0, 1000))
  }
  const terminal = isTerminal(to)
  if (terminal) sets.push('ended_at = COALESCE(ended_at, NOW(3))')
  if (terminal || opts.clearClaim) sets.push(DROP_CLAIM)
  if (to === 'paused') {
    sets.push('paused_at = COALESCE(?, NOW(3))')
    args.push(opts.pausedAt ?? null)
  } else sets.push('paused_at = NULL')
  if (terminal || to === 'paused') sets.push('wake_at = NULL')
  else if (opts.wakeAt !== undefined) {
    sets.push('wake_at = ?')
    args.push(opts.wakeAt)
  } else {
    // A key-less scheduled run has no wake_at (migration 0030): one moved on
    // without a wake time is due at its scheduled instant, as when every run
    // carried it, not parked out of the runner's sight. First in the SET list,
    // since MariaDB assigns left to right and `status` must still be the old one.
    sets.unshift("wake_at = IF(status = 'scheduled', COALESCE(wake_at, scheduled_for), wake_at)")
  }
  const type = alertForStatus(to)
  const owed = type === null ? null : { type, stamp: newAlertStamp() }
  if (owed) {
    sets.push('alert_stamp = ?')
    args.push(owed.stamp)
  }
  return { sets, args, owed }
}

/** The alert statements a move owes, for the runs named by `ids` (none when it owes nothing). */
export function alertStatementsFor(owed: AlertOwed | null, ids: readonly number[]): Statement[] {
  if (owed === null || ids.length === 0) return []
  const which = idSet('r.id', ids)
  return runAlertStatements(owed, { sql: which.sql, args: which.args })
}

/**
 * Send statements that must be kept or lost together: in the caller's
 * transaction when `db` is one, else as a transaction of their own (one round
 * trip). Answers each statement's answer in order.
 *
 * In a transaction they go one by one, not as one multi-statement text: for
 * the start's UPDATE of a thousand runs and its two alert statements, the
 * text cost MariaDB 5 to 9 µs a run more than the same three statements sent
 * in turn, in one A/B (interleaved rounds on one server) that a later
 * micro-benchmark could neither confirm nor refute (docs/performance.md);
 * two round trips a batch are cheap beside it.
 */
export async function sendTogether(db: Queryable, statements: readonly Statement[]): Promise<BatchAnswer[]> {
  if (isPool(db) && statements.length > 1) return db.commitAll(statements)
  const answers: BatchAnswer[] = []
  for (const st of statements) {
    const res = await db.runQuery(st.sql, st.params)
    answers.push({ rows: [], affectedRows: res.affectedRows, insertId: res.insertId })
  }
  return answers
}

/** A pool (autocommit per statement), as opposed to a transaction's connection. */
function isPool(db: Queryable): db is Db {
  return typeof (db as Partial<Db>).commitAll === 'function'
}

/**
 * A guarded status move `from → to` that reports whether it happened. `false` is
 * not an error: another worker, or an admin's cancel, won the race. A move into a
 * terminal status stamps `ended_at`, drops the claim and releases the run's
 * concurrency key.
 */
export async function transition(
  db: Queryable,
  id: number,
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions = {},
): Promise<boolean> {
  return (await transitionMany(db, [id], from, to, opts)) === 1
}

/** {@link transition} for many runs at once; answers how many moved. */
export async function transitionMany(
  db: Queryable,
  ids: readonly number[],
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions = {},
): Promise<number> {
  if (ids.length === 0) return 0
  const [move] = await sendTogether(db, transitionManyStatements(ids, from, to, opts))
  return move?.affectedRows ?? 0
}

/**
 * {@link transitionMany} as statements for a batch: the move first, then the
 * run alert it owes (a move into completed, failed or missed), and for a
 * terminal one the release of the keys (sent whatever the move answered; it
 * frees only the keys of runs no longer holding one).
 */
export function transitionManyStatements(
  ids: readonly number[],
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions = {},
): Statement[] {
  if (ids.length === 0) return []
  const { move, owed } = transitionStatement(ids, from, to, opts)
  return [move, ...alertStatementsFor(owed, ids), ...(isTerminal(to) ? [releaseKeyStatement(ids)] : [])]
}

/** The guarded UPDATE of {@link transitionMany}. */
function transitionStatement(
  ids: readonly number[],
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions,
): { move: Statement; owed: AlertOwed | null } {
  const froms: RunStatus[] = Array.isArray(from) ? [...from] : [from as RunStatus]
  // A paused run is never completed: a pause that was applied (a step was
  // still unfinished, STEPS_LEFT) holds, even when the runner finds every step
  // done in the meantime; the run completes once resumed.
  const { sets, args, owed } = transitionSets(to, opts)
  // The ids as ranges where they run on (a batch's runs mostly do): see idSet.
  const which = idSet('id', ids)
  // Terminal statuses are never left, whatever `from` a caller names.
  const move = {
    sql: `UPDATE event_runs SET ${sets.join(', ')}
      WHERE ${which.sql} AND status IN (${placeholders(froms.length)})
        AND status NOT IN (${placeholders(TERMINAL.length)})${opts.onlyWithStepsLeft ? ` AND ${STEPS_LEFT}` : ''}`,
    params: [...args, ...which.args, ...froms, ...TERMINAL],
  }
  return { move, owed }
}

/**
 * End a run (`cancelled` or `failed`) together with its unfinished steps, in
 * one transaction: pending, sleeping and parked steps become `cancelled` in the
 * same commit as the run's move, so no crash between the two can leave a
 * parked cue under a finished run (it would count as waiting for good). Safe to
 * repeat, so it runs again when it loses a conflict (a deadlock, or a Galera
 * certification failure at COMMIT). Answers whether the run moved.
 */
export function endWithSteps(
  db: Db,
  id: number,
  from: RunStatus | readonly RunStatus[],
  to: 'cancelled' | 'failed',
  opts: TransitionOptions = {},
): Promise<boolean> {
  return db.transaction(
    async (tx) => {
      const moved = await transition(tx, id, from, to, opts)
      if (moved) await cancelUnfinished(tx, id)
      return moved
    },
    { retryable: true },
  )
}

/**
 * A step that fails its run: the step `running → failed`, the run `→ failed`
 * and its other unfinished steps `→ cancelled`, all in one transaction, so the
 * step's failure is never recorded without the run's (the next tick would go
 * on past it) nor the run's without its steps'. Nothing moves when the step is
 * no longer running (a person skipped it meanwhile). Safe to repeat.
 */
export function failWithStep(
  db: Db,
  runId: number,
  from: readonly RunStatus[],
  step: { id: number; error: string },
  runError: string,
): Promise<{ stepFailed: boolean; runFailed: boolean }> {
  return db.transaction(
    async (tx) => {
      if (!(await failStep(tx, step.id, step.error))) return { stepFailed: false, runFailed: false }
      const runFailed = await transition(tx, runId, from, 'failed', { error: runError })
      if (runFailed) await cancelUnfinished(tx, runId)
      return { stepFailed: true, runFailed }
    },
    { retryable: true },
  )
}

/**
 * Drop the key locks held by these runs (only once they are no longer
 * key-holding: a lock whose run is still live stays).
 */
export async function releaseKey(db: Queryable, runIds: readonly number[]): Promise<number> {
  if (runIds.length === 0) return 0
  return runEach(db, [releaseKeyStatement(runIds)])
}

function releaseKeyStatement(runIds: readonly number[]): Statement {
  return {
    sql: `DELETE l FROM concurrency_locks l JOIN event_runs r ON r.id = l.run_id
      WHERE l.run_id IN (${placeholders(runIds.length)}) AND r.status NOT IN (${placeholders(KEY_HOLDING.length)})`,
    params: [...runIds, ...KEY_HOLDING],
  }
}

/**
 * Set health without touching status. Guarded on the current value, so a tick
 * that re-observes the same degradation does not restamp `updated_at`.
 */
export async function setHealth(db: Queryable, id: number, health: RunHealth): Promise<boolean> {
  const type = alertForHealth(health)
  if (type === null) {
    const res = await db.run('UPDATE event_runs SET health = ? WHERE id = ? AND health <> ?', [
      health,
      id,
      health,
    ])
    return res.affectedRows === 1
  }
  const owed = { type, stamp: newAlertStamp() }
  const [moved] = await sendTogether(db, [
    {
      sql: 'UPDATE event_runs SET health = ?, alert_stamp = ? WHERE id = ? AND health <> ?',
      params: [health, owed.stamp, id, health],
    },
    ...alertStatementsFor(owed, [id]),
  ])
  return moved?.affectedRows === 1
}

/**
 * Degrade the runs of steps whose failed attempt was written (a retry in its
 * backoff, or a step failed for good): a step a person skipped meanwhile
 * leaves its run as it was. Answers how many runs changed.
 */
export async function degradeForSteps(db: Queryable, stepIds: readonly number[]): Promise<number> {
  const statements = degradeForStepsStatements(stepIds)
  if (statements.length === 0) return 0
  const [degraded] = await sendTogether(db, statements)
  return degraded?.affectedRows ?? 0
}

/**
 * {@link degradeForSteps} as statements for a batch (none for no steps): the
 * UPDATE first, then the RUN_DEGRADED alert it owes.
 */
export function degradeForStepsStatements(stepIds: readonly number[]): Statement[] {
  if (stepIds.length === 0) return []
  const owed: AlertOwed = { type: 'RUN_DEGRADED', stamp: newAlertStamp() }
  const steps = placeholders(stepIds.length)
  return [
    {
      sql: `UPDATE event_runs r JOIN event_run_steps s ON s.run_id = r.id
        SET r.health = 'degraded', r.alert_stamp = ?
      WHERE s.id IN (${steps}) AND r.health <> 'degraded'
        AND s.last_error IS NOT NULL AND (s.status = 'failed' OR (s.status = 'pending' AND s.attempts > 0))`,
      params: [owed.stamp, ...stepIds],
    },
    // By the steps, as the UPDATE found them (a run named by two of its steps
    // is one event: the second row is a duplicate key, ignored).
    ...runAlertStatements(owed, {
      from: 'event_run_steps s JOIN event_runs r ON r.id = s.run_id',
      sql: `s.id IN (${steps})`,
      args: [...stepIds],
    }),
  ]
}

/**
 * A retried step succeeded: its runs are `ok` again, unless another of their
 * steps failed for good or is itself waiting out a retry. Answers how many changed.
 */
export async function restoreHealthOf(db: Queryable, runIds: readonly number[]): Promise<number> {
  return runEach(db, restoreHealthOfStatements(runIds))
}

/** {@link restoreHealthOf} as statements for a batch (none for no runs). */
export function restoreHealthOfStatements(runIds: readonly number[]): Statement[] {
  if (runIds.length === 0) return []
  return [
    {
      sql: `UPDATE event_runs r SET r.health = 'ok'
      WHERE r.id IN (${placeholders(runIds.length)}) AND r.health <> 'ok'
        AND NOT EXISTS (
          SELECT 1 FROM event_run_steps s
           WHERE s.run_id = r.id
             AND (s.status = 'failed' OR (s.status = 'pending' AND s.attempts > 0 AND s.last_error IS NOT NULL)))`,
      params: [...runIds],
    },
  ]
}

/** Set `current_phase`, guarded on the current value like {@link setHealth}. */
export async function setPhase(db: Queryable, id: number, phase: string): Promise<boolean> {
  return (await setPhaseMany(db, [id], phase)) === 1
}

/** {@link setPhase} for many runs moving into the same phase. */
export async function setPhaseMany(db: Queryable, ids: readonly number[], phase: string): Promise<number> {
  return runEach(db, setPhaseManyStatements(ids, phase))
}

/** {@link setPhaseMany} as statements for a batch (none for no runs). */
export function setPhaseManyStatements(ids: readonly number[], phase: string): Statement[] {
  if (ids.length === 0) return []
  return [
    {
      sql: `UPDATE event_runs SET current_phase = ? WHERE id IN (${placeholders(ids.length)}) AND NOT (current_phase <=> ?)`,
      params: [phase, ...ids, phase],
    },
  ]
}
