/**
 * The dispatcher under a trickle: events written while a pass is sending are
 * taken by the next pass at once, not an interval later, even though the
 * claim that found them came back with fewer than a batch (a short claim is
 * the usual case beside other instances or while a burst fills the outbox).
 * And a pass's deliveries end DELIVERED, one attempt each, with nothing
 * left claimed.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as channels from '../sql/notifications/channels.ts'
import * as events from '../sql/notifications/events.ts'
import { Dispatcher } from '../src/notify/dispatcher.ts'
import { useTestDb } from './helpers/db.ts'
import { channelFields, countRows } from './helpers/fixtures.ts'
import { eventually } from './helpers/server.ts'

const t = useTestDb()
const LATER = 10

let server: Server
let url = ''
const received: string[] = []
let onFirst: (() => Promise<void>) | null = null
/** Set: each request is answered this much later, and the most in flight at once is kept. */
let holdMs = 0
let inFlight = 0
let maxInFlight = 0

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume()
    req.on('end', async () => {
      received.push(String(req.headers['webhook-id']))
      if (holdMs > 0) {
        maxInFlight = Math.max(maxInFlight, ++inFlight)
        await new Promise((r) => setTimeout(r, holdMs))
        inFlight--
      }
      const first = onFirst
      onFirst = null
      // Events written while this pass is still sending.
      if (first) await first()
      res.statusCode = 204
      res.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

function event(dedupeKey: string) {
  return {
    type: 'RUN_FAILED',
    runId: null,
    stepId: null,
    dedupeKey,
    payload: { type: 'run.failed' },
    occurredAt: new Date(),
    definitionId: null,
    cueTeams: null,
    rehearsal: false,
  }
}

describe('the dispatcher under a trickle', () => {
  it('takes events written during a pass at once, though the claim that found the first was short', async () => {
    await channels.create(t.db, channelFields('trickle', { target: `${url}/hook` }))
    await t.db.transaction((tx) => events.emit(tx, event('first')))
    onFirst = async () => {
      for (let i = 0; i < LATER; i++) await t.db.transaction((tx) => events.emit(tx, event(`later-${i}`)))
    }
    // An interval far longer than the test: only passes that follow at once can deliver the later events.
    const dispatcher = new Dispatcher({
      db: t.db,
      owner: 'trickle',
      settings: { webhookAllow: [`${url}/`], secrets: {} },
      publicUrl: null,
      sendEmail: null,
      intervalMs: 600_000,
      batch: 20,
    })
    dispatcher.start()
    try {
      await eventually(() => received.length >= 1 + LATER, 5000)
    } finally {
      await dispatcher.stop()
    }
    expect(new Set(received).size).toBe(1 + LATER)
    expect(received).toHaveLength(1 + LATER)
    expect(await countRows(t.db, 'notification_deliveries', "status = 'DELIVERED' AND attempts = 1")).toBe(
      1 + LATER,
    )
    expect(await countRows(t.db, 'notification_deliveries', 'claim_token IS NOT NULL')).toBe(0)
  })
})

describe('the dispatcher under a backlog', () => {
  it('sends a backlog with a few claims in flight at once, each delivery once, at most batch × lanes at a time', async () => {
    const BACKLOG = 150
    const BATCH = 10
    const LANES = 3
    await channels.create(
      t.db,
      channelFields('backlog', { target: `${url}/backlog`, events: ['RUN_COMPLETED'] }),
    )
    await t.db.transaction((tx) =>
      events.emitMany(
        tx,
        Array.from({ length: BACKLOG }, (_, i) => ({ ...event(`backlog-${i}`), type: 'RUN_COMPLETED' })),
      ),
    )
    received.length = 0
    holdMs = 40
    // Two instances over one outbox.
    const dispatchers = ['one', 'two'].map(
      (owner) =>
        new Dispatcher({
          db: t.open(),
          owner,
          settings: { webhookAllow: [`${url}/`], secrets: {} },
          publicUrl: null,
          sendEmail: null,
          intervalMs: 600_000,
          batch: BATCH,
          lanes: LANES,
        }),
    )
    for (const d of dispatchers) d.start()
    try {
      await eventually(() => received.length >= BACKLOG, 10_000)
    } finally {
      await Promise.all(dispatchers.map((d) => d.stop()))
      holdMs = 0
    }
    expect(new Set(received).size).toBe(BACKLOG)
    expect(received).toHaveLength(BACKLOG)
    // More than one claim per instance in flight (the lanes), never more than the bound.
    expect(maxInFlight).toBeGreaterThan(2 * BATCH)
    expect(maxInFlight).toBeLessThanOrEqual(2 * BATCH * LANES)
    expect(await countRows(t.db, 'notification_deliveries', "status = 'DELIVERED' AND attempts = 1")).toBe(
      1 + LATER + BACKLOG,
    )
    expect(await countRows(t.db, 'notification_deliveries', 'claim_token IS NOT NULL')).toBe(0)
  })
})
