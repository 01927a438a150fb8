/**
 * RUN_LATE_START: runs still not started `lateStartSeconds` after their
 * scheduledFor, per channel (each has its own threshold). Waiting runs are a
 * range of idx_evrun_due (status, scheduled_for); a run blocked behind a
 * concurrency key is `scheduled` too, so it counts. Runs already announced to
 * the channel are left out by their event's dedupe key.
 */
import type { Queryable } from '../db.ts'

export interface LateRun {
  id: number
  definitionId: number
  definitionSlug: string
  definitionTitle: string
  scope: string
  scheduledFor: Date
  rehearsal: boolean
  status: string
}

/** The dedupe key of a run's late-start event for one channel. */
export function lateStartKey(runId: number, channelId: number): string {
  return `late:${runId}:${channelId}`
}

/** Runs late by `lateStartSeconds` (but by less than a day) not yet announced to `channelId`. */
export async function findLate(
  db: Queryable,
  channelId: number,
  lateStartSeconds: number,
  definitionIds: readonly number[] | null,
  limit = 200,
): Promise<LateRun[]> {
  const defs = definitionIds && definitionIds.length > 0 ? definitionIds : null
  const rows = await db.query(
    `SELECT r.id, r.definition_id, d.slug, d.title, r.scope, r.scheduled_for, r.rehearsal, r.status
       FROM event_runs r JOIN event_definitions d ON d.id = r.definition_id
      WHERE r.status IN ('scheduled', 'starting')
        AND r.scheduled_for <= NOW(3) - INTERVAL ? SECOND
        AND r.scheduled_for > NOW(3) - INTERVAL ? SECOND - INTERVAL 1 DAY
        ${defs ? `AND r.definition_id IN (${defs.map(() => '?').join(', ')})` : ''}
        AND NOT EXISTS (SELECT 1 FROM notification_events e
                         WHERE e.dedupe_key = CONCAT('late:', r.id, ':', ?))
      ORDER BY r.scheduled_for LIMIT ${Math.max(1, Math.min(1000, Math.trunc(limit)))}`,
    [lateStartSeconds, lateStartSeconds, ...(defs ?? []), channelId],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    definitionId: Number(r.definition_id),
    definitionSlug: String(r.slug),
    definitionTitle: String(r.title),
    scope: String(r.scope),
    scheduledFor: r.scheduled_for as Date,
    rehearsal: Boolean(Number(r.rehearsal)),
    status: String(r.status),
  }))
}
