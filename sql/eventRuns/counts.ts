/**
 * Counting `event_runs` for health, metrics and retention.
 */

import type { Queryable } from '../db.ts'
import { clampLimit, placeholders } from '../json.ts'
import type { RunStatus } from '../states.ts'
import { NON_TERMINAL, RUN_STATUSES, TERMINAL } from '../states.ts'
import type { Raw } from './rows.ts'

/**
 * Terminal runs that ended before `before`: what the log retention sweep walks.
 * Only terminal runs are ever eligible, which is a bound at all only because
 * every path a run can take reaches a terminal status. `withLogsOnly` skips runs
 * whose logs are already gone, so repeated sweeps make progress.
 */
export async function terminalBefore(
  db: Queryable,
  before: Date,
  limit = 500,
  opts: { withLogsOnly?: boolean } = {},
): Promise<number[]> {
  const n = clampLimit(limit, 500, 1, 5000)
  const logsFilter = opts.withLogsOnly
    ? 'AND EXISTS (SELECT 1 FROM event_run_logs l WHERE l.run_id = event_runs.id)'
    : ''
  const rows = await db.execute<Raw>(
    `SELECT id FROM event_runs
      WHERE status IN (${placeholders(TERMINAL.length)}) AND COALESCE(ended_at, updated_at) < ? ${logsFilter}
      ORDER BY id LIMIT ${n}`,
    [...TERMINAL, before],
  )
  return rows.map((r) => Number(r.id))
}

/** Run counts per status (every status present, zero when none). */
export async function countByStatus(db: Queryable): Promise<Record<RunStatus, number>> {
  const rows = await db.execute<Raw>('SELECT status, COUNT(*) AS n FROM event_runs GROUP BY status')
  const out = Object.fromEntries(RUN_STATUSES.map((status) => [status, 0])) as Record<RunStatus, number>
  for (const r of rows) out[r.status as RunStatus] = Number(r.n)
  return out
}

/**
 * Run counts of the statuses a run is still moving through (every one present,
 * zero when none). It walks only the status index's ranges for those statuses,
 * so its cost follows the runs in flight and scheduled ahead, not the history
 * {@link countByStatus} counts.
 */
export async function countLiveByStatus(
  db: Queryable,
): Promise<Record<(typeof NON_TERMINAL)[number], number>> {
  const rows = await db.execute<Raw>(
    `SELECT status, COUNT(*) AS n FROM event_runs WHERE status IN (${placeholders(NON_TERMINAL.length)}) GROUP BY status`,
    [...NON_TERMINAL],
  )
  const out = Object.fromEntries(NON_TERMINAL.map((status) => [status, 0])) as Record<
    (typeof NON_TERMINAL)[number],
    number
  >
  for (const r of rows) out[r.status as (typeof NON_TERMINAL)[number]] = Number(r.n)
  return out
}

/** How many non-terminal runs are degraded. */
export async function countDegraded(db: Queryable): Promise<number> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE health = 'degraded' AND status IN (${placeholders(NON_TERMINAL.length)})`,
    [...NON_TERMINAL],
  )
  return Number(row?.n ?? 0)
}
