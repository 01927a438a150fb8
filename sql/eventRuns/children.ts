/**
 * The rows that belong to a run: its steps, their cue ladders and answer
 * links, its log lines, its bulk-action memberships and its retry record (as
 * the original or as the retry). No foreign key ties
 * them to the run (migration 0024: the parent check cost every step and log
 * INSERT a lookup and a shared lock of the run's row, and every run delete a
 * cascade), so every statement that deletes runs calls this first, for the
 * same runs. Children before parents, grandchildren first: a delete cut short
 * between statements leaves runs with fewer rows, never a row whose run (or
 * step) is gone, and the next delete of those runs finishes the job.
 */
import type { Queryable, SqlValue } from '../db.ts'
import { placeholders } from '../json.ts'

/**
 * Which runs: ids, and optionally a condition on each run's row (alias `r`,
 * e.g. `r.status IN (…)`) so that a run that changed since it was chosen
 * keeps its rows.
 */
export interface RunSet {
  ids: readonly number[]
  guard?: { sql: string; args: readonly SqlValue[] }
}

/** `JOIN … WHERE …` naming the rows of `column`'s runs in `set`. */
function ofRuns(set: RunSet, column: string): { sql: string; args: SqlValue[] } {
  const ids = `IN (${placeholders(set.ids.length)})`
  if (!set.guard) return { sql: `WHERE ${column} ${ids}`, args: [...set.ids] }
  return {
    sql: `JOIN event_runs r ON r.id = ${column} WHERE r.id ${ids} AND ${set.guard.sql}`,
    args: [...set.ids, ...set.guard.args],
  }
}

/**
 * Delete every row that belongs to these runs (not the runs), one statement
 * per table. Multi-table DELETEs: MariaDB 10.11 runs `DELETE … WHERE run_id
 * IN (SELECT …)` as a dependent subquery over the whole child table, a join
 * reads each child table's run_id index (uq_evstep_run_seq for the steps).
 * Answers the rows deleted.
 */
export async function deleteRunChildren(db: Queryable, set: RunSet): Promise<number> {
  if (set.ids.length === 0) return 0
  const bySteps = ofRuns(set, 's.run_id')
  const statements: [string, { sql: string; args: SqlValue[] }][] = [
    ['DELETE k FROM cue_links k JOIN event_run_steps s ON s.id = k.step_id', bySteps],
    ['DELETE c FROM cue_ladders c', ofRuns(set, 'c.run_id')],
    ['DELETE l FROM event_run_logs l', ofRuns(set, 'l.run_id')],
    ['DELETE b FROM bulk_action_runs b', ofRuns(set, 'b.run_id')],
    // Gone with the retry, its original may be retried again (as when the
    // retry's own unique entry was the guard, before migration 0029).
    ['DELETE x FROM event_run_retries x', ofRuns(set, 'x.original_id')],
    ['DELETE x FROM event_run_retries x', ofRuns(set, 'x.run_id')],
    ['DELETE s FROM event_run_steps s', bySteps],
  ]
  let n = 0
  for (const [head, where] of statements)
    n += (await db.runQuery(`${head} ${where.sql}`, where.args)).affectedRows
  return n
}
