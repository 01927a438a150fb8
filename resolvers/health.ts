/** `health`: is the system driving runs, and what waits on people. */

import { builder } from '../schema/builder.ts'
import { HealthRef, type HealthShape } from '../schema/refs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import * as heartbeats from '../sql/runnerHeartbeats.ts'
import { RUN_STATUSES } from '../sql/states.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import { runCountsFor } from '../src/runCounts.ts'

/** A runner counts as live when it ticked within this window. */
export function livenessWindowMs(tickMs: number): number {
  return Math.max(30_000, 5 * tickMs)
}

async function health(ctx: ApiContext): Promise<HealthShape> {
  const { db, clock, tickMs } = ctx.services
  const emptyCounts = Object.fromEntries(RUN_STATUSES.map((s) => [s.toUpperCase(), 0]))
  if (!(await db.ping())) {
    return {
      ok: false,
      database: false,
      runners: [],
      runsByStatus: emptyCounts,
      degradedRuns: 0,
      waitingSteps: 0,
      oldestWaitingStepAt: null,
    }
  }
  const since = new Date(clock.now().getTime() - livenessWindowMs(tickMs))
  const [byStatus, degraded, waiting, live] = await Promise.all([
    // The same counter as /metrics: exact, without counting the history per call.
    runCountsFor(db)(),
    runs.countDegraded(db),
    steps.waitingSummary(db),
    heartbeats.listLive(db, since),
  ])
  const runsByStatus = { ...emptyCounts }
  for (const [status, n] of Object.entries(byStatus)) runsByStatus[status.toUpperCase()] = n
  return {
    ok: live.length > 0,
    database: true,
    runners: live,
    runsByStatus,
    degradedRuns: degraded,
    waitingSteps: waiting.count,
    oldestWaitingStepAt: waiting.oldestAt,
  }
}

builder.queryFields((t) => ({
  health: t.field({
    type: HealthRef,
    extensions: requires('viewer'),
    resolve: (_root, _args, ctx) => health(ctx),
  }),
}))
