/**
 * Bulk actions over runs: pause, resume or cancel every run a RunFilter
 * selects, the way an operator of many shows needs to ("cancel everything of
 * this show tonight"). Safe by default and bounded:
 * - a dry run unless asked otherwise: it answers how many runs would change;
 * - an empty filter is refused (it would be every run there is);
 * - at most {@link MAX_BULK_RUNS} runs per call (call again for the rest);
 * - applied in batches of {@link BULK_BATCH}, each its own short transaction
 *   that locks only its rows, with a yield to the event loop between batches,
 *   so the runner's claims wait at most one batch;
 * - each move is guarded like a single control: a run that moved on meanwhile
 *   (started, ended) is left as it is and not counted;
 * - audited once with its bulkId, and each changed run's log names it.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises'
import * as audit from '../../sql/auditLog.ts'
import * as bulkSql from '../../sql/bulkActions.ts'
import type { Db } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { BulkFilter } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import { NON_TERMINAL, type RunStatus } from '../../sql/states.ts'
import { AppError, badInput } from '../errors.ts'
import type { Clock } from '../runner/clock.ts'

/** Runs one call applies to, at most. */
export const MAX_BULK_RUNS = 10_000
/** Runs per short transaction. */
export const BULK_BATCH = 500

export type BulkAction = 'pause' | 'resume' | 'cancel'

export interface BulkDeps {
  db: Db
  clock: Clock
  nudge?: () => void
}

export interface BulkInput {
  action: BulkAction
  filter: BulkFilter
  /** @default true */
  dryRun?: boolean | null
  reason?: string | null
  actor: string
}

export interface BulkResult {
  /** Null for a dry run (nothing was recorded). */
  bulkId: string | null
  /** Runs the filter selects that the action applies to now (all of them, beyond the per-call cap too). */
  matched: number
  /** Runs this call changed (0 for a dry run; at most MAX_BULK_RUNS). */
  applied: number
  dryRun: boolean
}

/** The statuses each action moves from, and where to. */
const MOVES: Record<BulkAction, { from: readonly RunStatus[]; to: RunStatus }> = {
  pause: { from: ['running', 'ending'], to: 'paused' },
  resume: { from: ['paused'], to: 'running' },
  cancel: { from: NON_TERMINAL, to: 'cancelled' },
}

function isEmpty(f: BulkFilter): boolean {
  return (
    f.definitionId == null &&
    f.statuses == null &&
    (f.scope === null || f.scope === undefined) &&
    f.scheduledAfter == null &&
    f.scheduledBefore == null &&
    f.rehearsal == null
  )
}

function filterDetail(f: BulkFilter): Record<string, unknown> {
  return {
    definitionId: f.definitionId ?? null,
    statuses: f.statuses ?? null,
    scope: f.scope ?? null,
    scheduledAfter: f.scheduledAfter?.toISOString() ?? null,
    scheduledBefore: f.scheduledBefore?.toISOString() ?? null,
    rehearsal: f.rehearsal ?? null,
  }
}

export async function bulkRuns(deps: BulkDeps, input: BulkInput): Promise<BulkResult> {
  try {
    return await bulk(deps, input)
  } catch (err) {
    if (err instanceof AppError)
      await audit.record(deps.db, {
        actor: input.actor,
        action: 'bulkRuns',
        targetType: 'runs',
        targetId: null,
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000), bulkAction: input.action },
      })
    throw err
  }
}

async function bulk(deps: BulkDeps, input: BulkInput): Promise<BulkResult> {
  const { filter, action } = input
  if (isEmpty(filter))
    throw badInput(
      'filter: give at least one condition (definitionId, statuses, scope, scheduledAfter, scheduledBefore or rehearsal); an empty filter would select every run.',
    )
  if (input.reason != null && input.reason.length > 500) throw badInput('reason: at most 500 characters.')
  const dryRun = input.dryRun !== false
  const move = MOVES[action]
  const { ids, total } = await runs.selectForBulk(deps.db, filter, move.from, MAX_BULK_RUNS)
  if (dryRun) return { bulkId: null, matched: total, applied: 0, dryRun }

  const reason = input.reason?.trim() || null
  const bulkId = await bulkSql.create(deps.db, {
    action,
    actor: input.actor,
    reason,
    filter: filterDetail(filter),
  })
  const note = `bulk ${action} ${bulkId} by ${input.actor}${reason ? `: ${reason}` : ''}`
  let applied = 0
  for (let i = 0; i < ids.length; i += BULK_BATCH) {
    const batch = ids.slice(i, i + BULK_BATCH)
    const now = deps.clock.now()
    const moved = await deps.db.transaction(
      async (tx) => {
        // As resumeRun: the current wait and cue continue with the time they had left.
        if (action === 'resume') await runs.holdPausedTime(tx, batch, now)
        const changed = await runs.moveBatch(tx, batch, move.from, move.to, {
          ...(action === 'cancel' && {
            error: `cancelled by ${note.slice(`bulk cancel ${bulkId} by `.length)}`,
          }),
          ...(action === 'resume' && { wakeAt: now }),
          ...(action === 'pause' && { pausedAt: now }),
          // As pauseRun and cancelRun: a run whose last step is done is the runner's to complete.
          ...(action !== 'resume' && { onlyWithStepsLeft: true }),
        })
        await bulkSql.addRuns(tx, bulkId, changed)
        await logs.appendMany(
          tx,
          changed.map((runId) => ({
            runId,
            message: note,
            actor: input.actor,
            data: { action, bulkId: String(bulkId), reason },
          })),
        )
        return changed.length
      },
      { retryable: true },
    )
    applied += moved
    // Let the runner's tick (and everything else on this loop) in between batches.
    await yieldToLoop()
  }
  await bulkSql.finish(deps.db, bulkId, total, applied)
  await audit.record(deps.db, {
    actor: input.actor,
    action: 'bulkRuns',
    targetType: 'runs',
    targetId: String(bulkId),
    outcome: 'ok',
    detail: {
      bulkId: String(bulkId),
      bulkAction: action,
      filter: filterDetail(filter),
      reason,
      matched: total,
      applied,
    },
  })
  if (applied > 0 && action !== 'pause') deps.nudge?.()
  return { bulkId: String(bulkId), matched: total, applied, dryRun }
}
