/**
 * The run side of bulk actions: which runs a filter selects, and a guarded
 * move of one batch of them that answers exactly which moved.
 */
import type { Queryable, SqlValue } from '../db.ts'
import { cancelUnfinishedOfRuns } from '../eventSteps/index.ts'
import { placeholders } from '../json.ts'
import type { RunStatus } from '../states.ts'
import {
  alertStatementsFor,
  releaseKey,
  STEPS_LEFT,
  sendTogether,
  type TransitionOptions,
  transitionSets,
} from './transitions.ts'

/** What a bulk action may be narrowed to (the fields of RunFilter). */
export interface BulkFilter {
  definitionId?: number | null
  statuses?: readonly RunStatus[] | null
  scope?: string | null
  scheduledAfter?: Date | null
  scheduledBefore?: Date | null
  rehearsal?: boolean | null
}

function where(filter: BulkFilter, from: readonly RunStatus[]): { clause: string; args: SqlValue[] } {
  const conds: string[] = []
  const args: SqlValue[] = []
  if (filter.definitionId != null) {
    conds.push('definition_id = ?')
    args.push(filter.definitionId)
  }
  const statuses = filter.statuses ? from.filter((s) => filter.statuses?.includes(s)) : from
  if (statuses.length === 0) conds.push('FALSE')
  else {
    conds.push(`status IN (${placeholders(statuses.length)})`)
    args.push(...statuses)
  }
  if (filter.scope != null) {
    conds.push('scope = ?')
    args.push(filter.scope)
  }
  if (filter.rehearsal != null) {
    conds.push('rehearsal = ?')
    args.push(filter.rehearsal ? 1 : 0)
  }
  if (filter.scheduledAfter != null) {
    conds.push('scheduled_for >= ?')
    args.push(filter.scheduledAfter)
  }
  if (filter.scheduledBefore != null) {
    conds.push('scheduled_for < ?')
    args.push(filter.scheduledBefore)
  }
  return { clause: conds.join(' AND '), args }
}

/**
 * The ids of up to `limit` runs the filter selects whose status is one of
 * `from` (the statuses the action applies to), oldest id first, and how many
 * there are in all.
 */
export async function selectForBulk(
  db: Queryable,
  filter: BulkFilter,
  from: readonly RunStatus[],
  limit: number,
): Promise<{ ids: number[]; total: number }> {
  const { clause, args } = where(filter, from)
  const n = Math.max(1, Math.min(Math.trunc(limit), 100_000))
  const rows = await db.query<{ id: number }>(
    `SELECT id FROM event_runs WHERE ${clause} ORDER BY id LIMIT ${n}`,
    args,
  )
  const ids = rows.map((r) => Number(r.id))
  if (ids.length < n) return { ids, total: ids.length }
  const [count] = await db.query<{ n: number }>(`SELECT COUNT(*) AS n FROM event_runs WHERE ${clause}`, args)
  return { ids, total: Number(count?.n ?? ids.length) }
}

/**
 * Move one batch `from → to` inside the caller's (short) transaction: the rows
 * still in a `from` status are locked, moved, and answered, so the caller
 * knows exactly which runs this action changed. A terminal target also cancels
 * their unfinished steps and releases their keys.
 */
export async function moveBatch(
  tx: Queryable,
  ids: readonly number[],
  from: readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions,
): Promise<number[]> {
  if (ids.length === 0) return []
  const locked = await tx.query<{ id: number }>(
    `SELECT id FROM event_runs WHERE id IN (${placeholders(ids.length)}) AND status IN (${placeholders(from.length)})
      ${opts.onlyWithStepsLeft ? `AND ${STEPS_LEFT}` : ''} FOR UPDATE`,
    [...ids, ...from],
  )
  const moving = locked.map((r) => Number(r.id))
  if (moving.length === 0) return []
  const { sets, args, owed } = transitionSets(to, opts)
  await sendTogether(tx, [
    {
      sql: `UPDATE event_runs SET ${sets.join(', ')} WHERE id IN (${placeholders(moving.length)})`,
      params: [...args, ...moving],
    },
    ...alertStatementsFor(owed, moving),
  ])
  if (to === 'cancelled' || to === 'failed') {
    await cancelUnfinishedOfRuns(tx, moving)
    await releaseKey(tx, moving)
  }
  return moving
}
