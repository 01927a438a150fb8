/**
 * Which runs need the runner now: the due query, the keyed/overlap due query,
 * the runner's next wake-up and the missed sweep. Each reads an index range
 * that ends where its work ends.
 *
 * The due query reads `wake_at`, which is NULL or in the future for every run
 * parked on a cue, waiting out a timer or leased, so idle runs leave the index
 * and cannot starve new ones.
 */
import type { Queryable } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import { IN_FLIGHT } from '../states.ts'
import {
  hydrate,
  type Raw,
  type RunRow,
  SELECT_RUN,
  STARTS_BY_OWN_CLAIM,
  STARTS_UNDER_ROW_LOCK,
} from './rows.ts'

const DUE_STATUSES = ['scheduled', ...IN_FLIGHT] as const

/**
 * Runs that need the runner now: `wake_at` has passed and the run is not paused
 * or terminal. It selects rather than claims, so two sweepers may see the same
 * candidates and then disagree, harmlessly, about who owns each.
 *
 * Unlike a due query that takes the 50 oldest runs in flight, idle runs are not candidates at all:
 * a run parked on a cue has `wake_at` NULL (or its timeout), a run waiting out a
 * timer has it in the future, and a leased run has it at its lease expiry. So
 * 10,000 parked runs cost this query nothing.
 *
 * Two index ranges, merged: `idx_evrun_wake` up to `now` (in-flight runs, and
 * scheduled runs with a key or an overlap policy) and the scheduled range of
 * `idx_evrun_due` up to `now` (key-less scheduled runs, due at their
 * `scheduled_for`, their `wake_at` NULL since migration 0030). Runs ahead are
 * past both ranges' ends. A key-less scheduled run is answered with its
 * `wakeAt` null, as stored.
 */
export async function findDue(db: Queryable, now: Date, limit = 50): Promise<RunRow[]> {
  const n = clampLimit(limit, 50)
  const rows = await db.execute<Raw>(
    `(${SELECT_RUN} FORCE INDEX (idx_evrun_wake)
       WHERE r.wake_at <= ? AND r.status IN (${placeholders(DUE_STATUSES.length)})
       ORDER BY r.wake_at, r.id
       LIMIT ${n})
     UNION ALL
     (${SELECT_RUN} FORCE INDEX (idx_evrun_due)
       WHERE r.status = 'scheduled' AND r.scheduled_for <= ? AND ${STARTS_UNDER_ROW_LOCK}
       ORDER BY r.scheduled_for, r.id
       LIMIT ${n})
     ORDER BY COALESCE(wake_at, scheduled_for), id
     LIMIT ${n}`,
    [now, ...DUE_STATUSES, now],
  )
  return rows.map(hydrate)
}

/**
 * The soonest `wake_at` after `now` among runs the runner will need to look at
 * (scheduled or in flight), or null when there is none. The runner aims its
 * sleep at it, so a run due between two ticks starts at its time rather than at
 * the next tick. Two probes in one statement, one entry each: `idx_evrun_wake`
 * from `now` (in-flight runs, and scheduled runs with a key or an overlap
 * policy; parked, paused and terminal runs have no `wake_at` and are not in its
 * way), and the scheduled range of `idx_evrun_due` from `now` (key-less
 * scheduled runs, due at their `scheduled_for`, with no `wake_at` since
 * migration 0030).
 */
export async function nextWakeAfter(db: Queryable, now: Date): Promise<Date | null> {
  const rows = await db.execute<{ woken: Date | null; scheduled: Date | null }>(
    `SELECT (SELECT wake_at FROM event_runs FORCE INDEX (idx_evrun_wake)
              WHERE wake_at > ? AND status IN (${placeholders(DUE_STATUSES.length)})
              ORDER BY wake_at
              LIMIT 1) AS woken,
            (SELECT scheduled_for FROM event_runs FORCE INDEX (idx_evrun_due)
              WHERE status = 'scheduled' AND scheduled_for > ?
              ORDER BY scheduled_for
              LIMIT 1) AS scheduled`,
    [now, ...DUE_STATUSES, now],
  )
  const { woken, scheduled } = rows[0] ?? { woken: null, scheduled: null }
  if (woken === null || scheduled === null) return woken ?? scheduled
  return new Date(Math.min(woken.getTime(), scheduled.getTime()))
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
        AND ${STARTS_BY_OWN_CLAIM}
      ORDER BY r.keyed_due_at, r.id
      LIMIT ${n}`,
    [now],
  )
  return rows.map(hydrate)
}

/**
 * Runs whose `missed_at` has passed: scheduled runs whose start instant is more
 * than their definition's grace window ago. Only `scheduled` qualifies: a run
 * that reached `starting` has begun, and "began then stalled" is a different
 * fact from "never began".
 *
 * It reads the scheduled runs of idx_evrun_due (status, scheduled_for), oldest
 * first, up to now minus the smallest grace of any definition (idx_evdef_grace
 * answers it from one entry, and the optimiser folds it into the range before
 * reading a run), and checks `missed_at` on the rows. No run is missed earlier
 * than that, so runs ahead and runs within the smallest grace are outside the
 * range; what it reads and does not answer are runs past the smallest grace
 * but within a larger one of their own, and grace-exempt runs (missed_at NULL)
 * held past their time. There is no index of its own to write (migration
 * 0020): a new run and its start each wrote one.
 */
export async function findMissed(db: Queryable, now: Date, limit = 100): Promise<RunRow[]> {
  const n = clampLimit(limit, 100)
  const rows = await db.execute<Raw>(
    `${SELECT_RUN} FORCE INDEX (idx_evrun_due)
      WHERE r.status = 'scheduled'
        AND r.scheduled_for < ? - INTERVAL (SELECT MIN(d.grace_seconds) FROM event_definitions d) SECOND
        AND r.missed_at < ?
      ORDER BY r.scheduled_for, r.id
      LIMIT ${n}`,
    [now, now],
  )
  return rows.map(hydrate)
}

// A start claim also requires the run to be inside its grace window, so a run
// that should be `missed` can never be started by a sweeper that got there
