/**
 * The cues waiting on a person, oldest first, as the live inbox polls them:
 * first a narrow read of which cues wait, whom each is for and when its step
 * and run last changed; then, in full, only the steps and runs the poller has
 * no current copy of (src/api/waitingCueReader.ts keeps the copies).
 *
 * The narrow read walks the waiting-steps index once for every subscriber,
 * where reading each owner's inbox by itself walks it once per owner (every
 * owner's part scans past everybody else's cues). Owners' inboxes are cut
 * from its rows by the caller, with the rule of {@link listWaitingForEach}'s
 * SQL filter: see {@link isFor}.
 */
import type { Queryable } from './db.ts'
import type { Raw } from './eventRuns/rows.ts'

/**
 * How old a row's `updated_at` must be, by the database's clock, before a copy
 * of it may stand for it while `updated_at` stays the same. `updated_at` is
 * the statement's time to the millisecond, so a second change in the same
 * millisecond keeps it; a copy read this long after is past the
 * transactions that could still commit such a change (ours last milliseconds,
 * a lock wait at most a second or so).
 */
export const SETTLED_MS = 2000

/** One waiting cue as the narrow read sees it. */
export interface WaitingCueKey {
  stepId: number
  runId: number
  /** The step's and its run's `updated_at` (epoch ms). */
  stepUpdatedAt: number
  runUpdatedAt: number
  /** Each row's `updated_at` was at least {@link SETTLED_MS} old when read. */
  stepSettled: boolean
  runSettled: boolean
  /** The names and `team:` names the cue is for; empty: anyone who may operate. */
  assignees: readonly string[]
}

/**
 * The narrow read's statement, for `limit` cues and one more (which tells
 * whether more wait). STRAIGHT_JOIN and the index keep the waiting cues as
 * the driving range, read in order until the limit, however few steps the
 * table holds (the optimiser would scan a small table whole) and however
 * many runs there are.
 */
export function waitingCueKeysSql(limit: number): string {
  const n = Math.max(1, Math.trunc(limit))
  return `SELECT STRAIGHT_JOIN s.id, s.run_id, s.updated_at, r.updated_at AS run_updated_at,
        s.updated_at <= NOW(3) - INTERVAL ${SETTLED_MS * 1000} MICROSECOND AS step_settled,
        r.updated_at <= NOW(3) - INTERVAL ${SETTLED_MS * 1000} MICROSECOND AS run_settled,
        l.step_id AS cue_ladder, l.assignees AS cue_assignees
       FROM event_run_steps s FORCE INDEX (idx_evstep_waiting_since)
       JOIN event_runs r ON r.id = s.run_id
       LEFT JOIN cue_ladders l ON l.step_id = s.id
      WHERE s.waiting_since IS NOT NULL
      ORDER BY s.waiting_since, s.id
      LIMIT ${n + 1}`
}

/**
 * The oldest `limit` waiting cues, narrow: ids, change times and assignees.
 * `complete` is false when more cues wait beyond `limit`.
 */
export async function listWaitingCueKeys(
  db: Queryable,
  limit: number,
): Promise<{ keys: WaitingCueKey[]; complete: boolean }> {
  const n = Math.max(1, Math.trunc(limit))
  const rows = await db.query<Raw>(waitingCueKeysSql(n))
  const complete = rows.length <= n
  if (!complete) rows.length = n
  const keys = rows.map(
    (r): WaitingCueKey => ({
      stepId: Number(r.id),
      runId: Number(r.run_id),
      stepUpdatedAt: (r.updated_at as Date).getTime(),
      runUpdatedAt: (r.run_updated_at as Date).getTime(),
      stepSettled: Number(r.step_settled) === 1,
      runSettled: Number(r.run_settled) === 1,
      assignees: assigneesOf(r),
    }),
  )
  return { keys, complete }
}

/** No ladder, or a ladder for nobody in particular: the cue is for anyone (an empty list). */
function assigneesOf(row: Raw): string[] {
  if (row.cue_ladder === null || row.cue_ladder === undefined) return []
  // The driver hands JSON columns over parsed: an array, or a scalar as its value.
  let value = row.cue_assignees
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value)
    } catch {
      // A scalar string the driver already parsed ("Bob" stored as the JSON "Bob").
    }
  }
  if (Array.isArray(value)) return value.map(String)
  // A scalar is one assignee, as JSON_OVERLAPS reads it.
  return value === null || value === undefined ? [] : [String(value)]
}

/**
 * Whether a caller known by `identities` (a name and `team:` names) sees a
 * cue for `assignees` in `waitingSteps(mine: true)`: unassigned cues, and
 * cues whose assignees include one of them, compared exactly as MariaDB's
 * JSON_OVERLAPS compares strings (byte for byte, case and accents included).
 */
export function isFor(assignees: readonly string[], identities: ReadonlySet<string>): boolean {
  if (assignees.length === 0) return true
  for (const a of assignees) if (identities.has(a)) return true
  return false
}
