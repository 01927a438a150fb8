/**
 * What the dispatcher does after its passes, each at its own pace: the
 * late-start sweep (at most once a second) and outbox retention (at most once
 * a minute): events older than NOTIFICATION_RETENTION_DAYS whose deliveries
 * are all finished go, with their deliveries, a bounded batch at a time. So
 * the outbox is history with a horizon, like runs, and an instance that has
 * delivered 100,000 notifications reads no more, idle, than one that has
 * delivered none: the dispatcher's idle read is a range of PENDING rows.
 */
import type { Db } from '../../sql/db.ts'
import { deleteFinishedBefore } from '../../sql/notifications/deliveries.ts'
import { sweepLateStarts } from './lateStart.ts'

export interface NotifyHousekeepingOptions {
  /** How long finished notifications are kept. */
  retentionMs: number
  lateStartEveryMs?: number
  retentionEveryMs?: number
  /** Events deleted per retention pass at most. @default 1000 */
  retentionBatch?: number
}

export function notifyHousekeeping(db: Db, opts: NotifyHousekeepingOptions): () => Promise<void> {
  let lastLate = 0
  let lastRetention = 0
  return async () => {
    const now = Date.now()
    if (now - lastLate >= (opts.lateStartEveryMs ?? 1000)) {
      lastLate = now
      await sweepLateStarts(db)
    }
    if (now - lastRetention >= (opts.retentionEveryMs ?? 60_000)) {
      lastRetention = now
      await deleteFinishedBefore(db, new Date(now - opts.retentionMs), opts.retentionBatch ?? 1000)
    }
  }
}
