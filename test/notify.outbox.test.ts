/**
 * The outbox at the SQL level: nothing is written when no channel listens;
 * deliveries are claimed by one claimer at a time; retention removes finished
 * history only; retry delays follow the promised curve.
 */
import { describe, expect, it } from 'vitest'
import * as channels from '../sql/notifications/channels.ts'
import * as deliveries from '../sql/notifications/deliveries.ts'
import * as events from '../sql/notifications/events.ts'
import { deliveryRetryDelayMs, MAX_RETRY_DELAY_MS } from '../src/notify/dispatcher.ts'
import { useTestDb } from './helpers/db.ts'
import { channelFields, countRows } from './helpers/fixtures.ts'

const t = useTestDb()

function event(dedupeKey: string, type = 'RUN_FAILED') {
  return {
    type,
    runId: null,
    stepId: null,
    dedupeKey,
    payload: { type: 'run.failed' },
    occurredAt: new Date(),
    definitionId: 7,
    cueTeams: null,
    rehearsal: false,
  }
}

const channel = channelFields

describe('the outbox', () => {
  it('writes nothing while no enabled channel listens, and once per dedupe key', async () => {
    const db = t.db
    expect(await db.transaction((tx) => events.emit(tx, event('a')))).toBe(0)
    await channels.create(db, channel('off', { enabled: false }))
    await channels.create(db, channel('other-def', { definitionIds: [8] }))
    expect(await db.transaction((tx) => events.emit(tx, event('b')))).toBe(0)
    expect(await countRows(db, 'notification_events')).toBe(0)
    await channels.create(db, channel('on'))
    await channels.create(db, channel('this-def', { definitionIds: [7] }))
    expect(await db.transaction((tx) => events.emit(tx, event('c')))).toBe(2)
    expect(await db.transaction((tx) => events.emit(tx, event('c')))).toBe(0)
    expect(await countRows(db, 'notification_events')).toBe(1)
  })

  it('hands each due delivery to one claimer at a time', async () => {
    const db = t.db
    for (let i = 0; i < 30; i++) await db.transaction((tx) => events.emit(tx, event(`claim-${i}`)))
    const due = await countRows(db, 'notification_deliveries', "status = 'PENDING'")
    const claims = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        deliveries.claimDue(t.open(), `i${i}`, `token${i}`.padEnd(32, '0'), 30_000, 200),
      ),
    )
    const ids = claims.flat().map((d) => d.id)
    expect(ids).toHaveLength(due)
    expect(new Set(ids).size).toBe(due)
    // A second claim while the leases hold finds nothing.
    expect(await deliveries.claimDue(db, 'late', 'x'.repeat(32), 30_000, 200)).toEqual([])
  })

  it('retention deletes old finished events with their deliveries, never pending ones', async () => {
    const db = t.db
    await db.run("UPDATE notification_deliveries SET status = 'DELIVERED' WHERE event_row_id % 2 = 0")
    await db.run('UPDATE notification_events SET occurred_at = NOW(3) - INTERVAL 40 DAY')
    const pendingBefore = await countRows(db, 'notification_deliveries', "status = 'PENDING'")
    const deleted = await deliveries.deleteFinishedBefore(db, new Date(Date.now() - 30 * 86_400_000), 1000)
    expect(deleted).toBeGreaterThan(0)
    expect(await countRows(db, 'notification_deliveries', "status = 'PENDING'")).toBe(pendingBefore)
    expect(await countRows(db, 'notification_deliveries', "status = 'DELIVERED'")).toBe(0)
  })

  it('retries about a second after the first failure, doubling, never more than 5 minutes apart', () => {
    const low = () => 0
    const high = () => 0.999999
    expect(deliveryRetryDelayMs(1, low)).toBeGreaterThanOrEqual(700)
    expect(deliveryRetryDelayMs(1, high)).toBeLessThanOrEqual(1500)
    expect(deliveryRetryDelayMs(2, high)).toBeGreaterThan(deliveryRetryDelayMs(1, high))
    expect(deliveryRetryDelayMs(30, high)).toBeLessThanOrEqual(MAX_RETRY_DELAY_MS)
    expect(deliveryRetryDelayMs(30, low)).toBeGreaterThanOrEqual(MAX_RETRY_DELAY_MS / 2)
  })
})
