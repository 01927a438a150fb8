/**
 * The late-start sweep: for each channel listening for RUN_LATE_START, the
 * runs that are `lateStartSeconds` past their scheduledFor and still not
 * started get one event each, for that channel only (the dedupe key makes
 * it once per run and channel, whichever instance sweeps).
 */
import type { Db } from '../../sql/db.ts'
import * as channels from '../../sql/notifications/channels.ts'
import * as events from '../../sql/notifications/events.ts'
import { findLate, lateStartKey } from '../../sql/notifications/lateStart.ts'
import { body } from './payload.ts'

/** Answers how many late-start events were written. */
export async function sweepLateStarts(db: Db, now: Date = new Date()): Promise<number> {
  const listening = await channels.listeningTo(db, 'RUN_LATE_START')
  let written = 0
  for (const channel of listening) {
    const late = await findLate(db, channel.id, channel.lateStartSeconds, channel.definitionIds)
    for (const run of late) {
      const made = await db.transaction((tx) =>
        events.emitFor(tx, channel.id, {
          type: 'RUN_LATE_START',
          runId: run.id,
          stepId: null,
          dedupeKey: lateStartKey(run.id, channel.id),
          payload: {
            ...body('RUN_LATE_START', now, { run: { ...run } }),
            lateBySeconds: Math.max(0, Math.round((now.getTime() - run.scheduledFor.getTime()) / 1000)),
          },
          occurredAt: now,
          definitionId: run.definitionId,
          cueTeams: null,
          rehearsal: run.rehearsal,
        }),
      )
      if (made !== null) written++
    }
  }
  return written
}
