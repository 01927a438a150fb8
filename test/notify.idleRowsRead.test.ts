/**
 * An idle dispatcher costs the same beside no notifications and beside 50,000
 * delivered ones: each statement of an idle pass (the due probe, the claim,
 * outbox retention with nothing old enough, the late-start sweep) reads a
 * number of rows that does not grow with the delivered history. The outbox is
 * history; the dispatcher's reads must be index ranges that end where its
 * work ends.
 *
 * The measure is rows read by the server (the session's `Handler_read_*`
 * counters, summed) on a pool of one connection, as in idle.rowsRead.test.ts.
 * A statement fails when the larger size reads more than 1.5 times the
 * smaller, with a floor of {@link FLOOR} rows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as channels from '../sql/notifications/channels.ts'
import * as deliveries from '../sql/notifications/deliveries.ts'
import { sweepLateStarts } from '../src/notify/lateStart.ts'
import { useTestDb } from './helpers/db.ts'

const FLOOR = 30
const RATIO = 1.5
const HISTORY = 50_000

const t = useTestDb()
let m: Db
let channelId = 0
const read: Record<'none' | 'history', Record<string, number>> = { none: {}, history: {} }

async function rowsRead(fn: () => Promise<unknown>): Promise<number> {
  const counters = async () => {
    const rows = await m.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Handler_read%'")
    return rows.reduce((sum, r) => sum + Number(r.Value), 0)
  }
  const before = await counters()
  await fn()
  return (await counters()) - before
}

async function measureAll(size: 'none' | 'history'): Promise<void> {
  const r = read[size]
  r['due probe'] = await rowsRead(() => deliveries.anyDue(m))
  r['claim'] = await rowsRead(() => deliveries.claimDue(m, 'measure', 'f'.repeat(32), 30_000, 20))
  r['outbox retention'] = await rowsRead(() =>
    deliveries.deleteFinishedBefore(m, new Date(Date.now() - 30 * 86_400_000), 1000),
  )
  r['late-start sweep'] = await rowsRead(() => sweepLateStarts(m))
}

/** Delivered notifications, one every 20 s back from now: all inside a 30-day retention. */
async function addHistory(): Promise<void> {
  await t.db.runQuery(
    `INSERT INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     SELECT CONCAT('evt_hist', LPAD(seq, 24, '0')), 'CUE_WAITING', seq, seq, CONCAT('hist:', seq),
            JSON_OBJECT('type', 'cue.waiting'), NOW(3) - INTERVAL seq * 20 SECOND
       FROM seq_1_to_${HISTORY}`,
  )
  await t.db.run(
    `INSERT INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, attempts, created_at, delivered_at, give_up_at)
     SELECT id, ?, run_id, 'DELIVERED', 1, occurred_at, occurred_at + INTERVAL 0.2 SECOND,
            occurred_at + INTERVAL 24 HOUR
       FROM notification_events`,
    [channelId],
  )
  await t.db.runQuery('ANALYZE TABLE notification_events, notification_deliveries')
}

beforeAll(async () => {
  channelId = await channels.create(t.db, {
    name: 'idle',
    kind: 'WEBHOOK',
    target: 'http://127.0.0.1:9/hook',
    events: ['CUE_WAITING', 'RUN_LATE_START', 'RUN_COMPLETED'],
    definitionIds: null,
    teams: null,
    lateStartSeconds: 60,
    signingSecret: null,
    enabled: true,
  })
  m = t.open({ connectionLimit: 1 })
  await measureAll('none')
  await addHistory()
  await measureAll('history')
}, 120_000)

afterAll(async () => {
  await m?.close()
})

describe(`an idle dispatcher beside ${HISTORY} delivered notifications`, () => {
  it('the history is there and nothing of it is due', async () => {
    const [row] = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM notification_deliveries WHERE status = 'DELIVERED'`,
    )
    expect(Number(row?.n)).toBe(HISTORY)
    expect(await deliveries.anyDue(t.db)).toBe(false)
  })

  for (const name of ['due probe', 'claim', 'outbox retention', 'late-start sweep']) {
    it(`${name} reads no more rows than with none`, () => {
      const none = read.none[name] as number
      const history = read.history[name] as number
      expect(history, `${name}: ${none} rows with none, ${history} with history`).toBeLessThanOrEqual(
        Math.max(FLOOR, none * RATIO),
      )
    })
  }
})
