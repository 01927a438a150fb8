/**
 * The wake lane's claim (src/runner/wakeLane.ts): due in-flight runs leased
 * as a pass leases them ({@link leaseDueThenRead}), read with each one's next
 * step in one statement, which the lane's first round takes as read.
 */
import type { Queryable } from '../db.ts'
import { hydrate as hydrateStep, STEP_COLUMNS, type StepRow } from '../eventSteps/rows.ts'
import { type LeasedRun, leaseDueThenRead } from './claims.ts'
import {
  DEFINITION_NAME_COLUMNS,
  hydratePrefixedWithDefinition,
  PREFIXED_RUN_COLUMNS,
  type Raw,
} from './rows.ts'

/** Leased runs, and the next step of each whose steps exist (null: none left). */
export interface LeasedWithSteps {
  runs: LeasedRun[]
  /**
   * By run id. A run still `starting` is not in it: its steps are made by
   * its expansion, after this read, and are read then.
   */
  nextSteps: Map<number, StepRow | null>
}

/**
 * `claimTickBatch` (claims.ts), each run read with its next step (the first
 * that is `pending` or `running`) in the same statement: what the wake lane
 * advances at once, a round trip fewer between a GO (or a timer's end) and
 * the run's next step. `dueBy`: runs due by then, for a claim made ahead of
 * a timer's end (see {@link DueLease}).
 */
export async function claimTickBatchWithSteps(
  db: Queryable,
  owner: string,
  token: string,
  leaseUntil: Date,
  now: Date,
  limit: number,
  dueBy?: Date,
): Promise<LeasedWithSteps> {
  return leaseDueThenRead(
    db,
    { owner, token, leaseUntil, now, limit, dueBy },
    {
      read: (range) => findLeasedWithSteps(db, token, leaseUntil, range),
      count: (found) => found.runs.length,
      none: { runs: [], nextSteps: new Map() },
    },
  )
}

/**
 * `findLeased` (claims.ts) with each run's next step beside it: the first step by
 * `seq` still `pending` or `running` (as `nextSteps` reads it, sql/eventSteps),
 * found through the run's `uq_evstep_run_seq` range; a run with none has a
 * row of NULL step columns (see {@link LeasedWithSteps} for a `starting` one).
 */
export async function findLeasedWithSteps(
  db: Queryable,
  token: string,
  leaseUntil: Date,
  by: '=' | '<=',
): Promise<LeasedWithSteps> {
  const rows = await db.execute<Raw>(
    `SELECT ${PREFIXED_RUN_COLUMNS}, ${DEFINITION_NAME_COLUMNS}, ${STEP_COLUMNS}
       FROM event_runs r FORCE INDEX (idx_evrun_wake) JOIN event_definitions d ON d.id = r.definition_id
       LEFT JOIN event_run_steps s ON s.run_id = r.id AND s.seq = (
              SELECT MIN(n.seq) FROM event_run_steps n FORCE INDEX (uq_evstep_run_seq)
               WHERE n.run_id = r.id AND n.status IN ('pending','running'))
      WHERE r.wake_at ${by} ? AND r.claim_token = ? ORDER BY r.id`,
    [leaseUntil, token],
  )
  const runs: LeasedRun[] = []
  const nextSteps = new Map<number, StepRow | null>()
  for (const row of rows) {
    const run = hydratePrefixedWithDefinition(row)
    runs.push(run)
    if (run.status !== 'starting') nextSteps.set(run.id, row.id === null ? null : hydrateStep(row))
  }
  return { runs, nextSteps }
}
