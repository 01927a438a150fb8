/**
 * A pause holds the show's time: the run's current wait and cue stop counting
 * while it is paused and continue at resume with what they had left. The pause
 * only stamps `paused_at` (transitions.ts); the resume, before it moves the run
 * back to running and in the same transaction, moves every timer of the run's
 * current step later by the time spent paused: the step's wake time (a
 * re-entered `core.wait`, and a cue without a ladder, read it back) and the
 * ladder's opening (its rungs count from it) and deadline. The step's
 * `started_at` stays the instant it really started. Done once, at the resume, on rows locked by
 * it, so two resumes (or a resume and a cancel) cannot both shift, and nothing
 * is read or written while a run stays paused.
 */
import type { Queryable } from '../db.ts'
import { placeholders } from '../json.ts'

/** Microseconds the run `r` has been paused by `?` (never negative: a clock step back holds nothing). */
const HELD_US = 'GREATEST(0, TIMESTAMPDIFF(MICROSECOND, r.paused_at, ?))'

/**
 * Shift the timers of these paused runs by how long each has been paused as of
 * `now`, locking the runs still paused. Call inside the transaction that then
 * moves them `paused → running`. Answers the ids of the runs it locked (those
 * still paused).
 */
export async function holdPausedTime(tx: Queryable, ids: readonly number[], now: Date): Promise<number[]> {
  if (ids.length === 0) return []
  const locked = await tx.query<{ id: number }>(
    `SELECT id FROM event_runs WHERE id IN (${placeholders(ids.length)}) AND status = 'paused' FOR UPDATE`,
    [...ids],
  )
  const paused = locked.map((r) => Number(r.id))
  if (paused.length === 0) return []
  const inRuns = `r.id IN (${placeholders(paused.length)}) AND r.status = 'paused' AND r.paused_at IS NOT NULL`
  // The open cue's ladder: its rungs count from opened_at, its deadline is stored.
  await tx.runQuery(
    `UPDATE cue_ladders l
       JOIN event_runs r ON r.id = l.run_id
       JOIN event_run_steps s ON s.id = l.step_id
        SET l.opened_at = l.opened_at + INTERVAL ${HELD_US} MICROSECOND,
            l.deadline_at = l.deadline_at + INTERVAL ${HELD_US} MICROSECOND
      WHERE ${inRuns} AND l.answer_outcome IS NULL AND s.status = 'running'`,
    [now, now, ...paused],
  )
  // The current step if it is sleeping (a wait) or parked (a cue): a step in
  // retry backoff is the machinery's time, not the show's, and is left as it is.
  await tx.runQuery(
    `UPDATE event_run_steps s
       JOIN event_runs r ON r.id = s.run_id
        SET s.wake_at = s.wake_at + INTERVAL ${HELD_US} MICROSECOND
      WHERE ${inRuns} AND s.status = 'running' AND s.wake_at IS NOT NULL`,
    [now, ...paused],
  )
  return paused
}
