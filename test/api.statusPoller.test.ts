/**
 * The one poller behind `runStatus`: one statement per interval for every
 * watched run together, none when nobody watches, chunks only past 1000 ids;
 * and end to end, 50 graphql-ws subscribers over 10 runs cost one query per
 * interval.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Queryable } from '../sql/db.ts'
import type { RunStatusSnapshot } from '../sql/eventRuns/index.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { POLL_CHUNK, StatusPoller } from '../src/api/statusPoller.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import {
  eventually,
  sleep,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

let s: TestServer
const runIds: number[] = []
/** A run of its own for tests that finish it. */
let spareRunId = 0

beforeAll(async () => {
  s = await startTestServer({ env: { STATUS_POLL_MS: '50' } })
  const fx = await makeDefinition(s.t.db)
  for (let i = 0; i < 10; i++) runIds.push((await makeRun(s.t.db, { definition: fx })).id)
  spareRunId = (await makeRun(s.t.db, { definition: fx })).id
})
afterAll(async () => {
  await s?.close()
})

describe('StatusPoller', () => {
  it('50 listeners over 10 runs: one statement per interval; none once nobody listens', async () => {
    const db = s.t.open()
    const poller = new StatusPoller({ db, intervalMs: 40 })
    try {
      const seen = new Map<number, number>()
      const stops = Array.from({ length: 50 }, (_, i) => {
        const id = runIds[i % 10] as number
        return poller.listen(id, {
          onSnapshot: (snap) => {
            expect(snap?.id).toBe(id)
            seen.set(i, (seen.get(i) ?? 0) + 1)
          },
          onClose: () => {},
        })
      })
      expect(poller.runCount).toBe(10)
      const before = db.stats.statements
      const pollsBefore = poller.polls
      const started = Date.now()
      await sleep(420)
      const elapsed = Date.now() - started
      const statements = db.stats.statements - before
      const polls = poller.polls - pollsBefore
      expect(statements).toBe(polls)
      expect(polls).toBeGreaterThanOrEqual(3)
      expect(polls).toBeLessThanOrEqual(Math.ceil(elapsed / 40) + 1)
      // Every listener heard every poll.
      expect([...seen.values()].every((n) => n >= polls - 1)).toBe(true)

      for (const stop of stops) stop()
      expect(poller.runCount).toBe(0)
      await sleep(60) // a poll already in flight may finish
      const idle = db.stats.statements
      await sleep(300)
      expect(db.stats.statements - idle).toBe(0)
    } finally {
      await poller.close()
    }
  })

  it('splits only beyond 1000 ids', async () => {
    const calls: number[] = []
    const fake = {
      async query(_sql: string, params: readonly unknown[] = []) {
        calls.push(params.length)
        return []
      },
    } as unknown as Queryable
    const poller = new StatusPoller({ db: fake, intervalMs: 10 })
    try {
      const stops = Array.from({ length: 2 * POLL_CHUNK + 500 }, (_, i) =>
        poller.listen(i + 1, { onSnapshot: () => {}, onClose: () => {} }),
      )
      await eventually(() => calls.length >= 3)
      expect(calls.slice(0, 3)).toEqual([1000, 1000, 500])
      for (const stop of stops) stop()
      calls.length = 0
      const only = poller.listen(1, { onSnapshot: () => {}, onClose: () => {} })
      await eventually(() => calls.length >= 1)
      expect(calls[0]).toBe(1)
      only()
    } finally {
      await poller.close()
    }
  })

  it('watch(): the current state at once, then each change, ending after a terminal status', async () => {
    const db = s.t.open()
    const poller = new StatusPoller({ db, intervalMs: 20 })
    const id = spareRunId
    try {
      const [initial] = await runs.statusesOf(db, [id])
      const events: RunStatusSnapshot[] = []
      const iterator = poller.watch(initial as RunStatusSnapshot)
      const consumed = (async () => {
        for await (const e of iterator) events.push(e)
      })()
      await eventually(() => events.length === 1)
      await sleep(100)
      expect(events).toHaveLength(1) // nothing changed, nothing sent
      await runs.transition(db, id, 'scheduled', 'cancelled', { error: 'test' })
      await consumed // completes by itself
      expect(events.map((e) => e.status)).toEqual(['scheduled', 'cancelled'])
      expect(poller.listenerCount).toBe(0)
    } finally {
      await poller.close()
    }
  })

  it('close() ends every watcher', async () => {
    const db = s.t.open()
    const poller = new StatusPoller({ db, intervalMs: 20 })
    const [initial] = await runs.statusesOf(db, [runIds[0] as number])
    const iterator = poller.watch(initial as RunStatusSnapshot)
    const consumed = (async () => {
      let n = 0
      for await (const _ of iterator) n++
      return n
    })()
    await eventually(() => poller.listenerCount === 1)
    await poller.close()
    expect(await consumed).toBe(1)
  })
})

describe('runStatus subscriptions end to end', () => {
  it('50 graphql-ws subscribers over 10 runs: one status query per interval, none after they leave', async () => {
    const db = s.app.db
    const clients = Array.from({ length: 5 }, () => wsClient(s, 'viewer'))
    try {
      const subs = Array.from({ length: 50 }, (_, i) =>
        wsSubscribe<{ runStatus: { id: string } }>(
          clients[i % 5] as ReturnType<typeof wsClient>,
          'subscription ($id: ID!) { runStatus(id: $id) { id status } }',
          { id: String(runIds[i % 10]) },
        ),
      )
      await Promise.all(subs.map((sub) => sub.until((e) => e.data?.runStatus != null)))
      await eventually(() => s.app.poller.listenerCount === 50)
      expect(s.app.poller.runCount).toBe(10)
      const before = db.stats.statements
      const pollsBefore = s.app.poller.polls
      const started = Date.now()
      await sleep(500)
      const elapsed = Date.now() - started
      const statements = db.stats.statements - before
      const polls = s.app.poller.polls - pollsBefore
      // Every statement in that window was a poll, and there was one per interval (50 ms), not per subscriber.
      expect(statements).toBe(polls)
      expect(polls).toBeGreaterThanOrEqual(4)
      expect(polls).toBeLessThanOrEqual(Math.ceil(elapsed / 50) + 1)

      for (const sub of subs) sub.stop()
      await eventually(() => s.app.poller.listenerCount === 0)
      await sleep(60)
      const idle = db.stats.statements
      await sleep(300)
      expect(db.stats.statements - idle).toBe(0)
    } finally {
      await Promise.all(clients.map((c) => c.dispose()))
    }
  })

  it('a client that goes away (SSE aborted, WebSocket closed) stops being polled for', async () => {
    const sse = sseSubscribe(s, 'subscription ($id: ID!) { runStatus(id: $id) { id } }', {
      id: String(runIds[0]),
    })
    const client = wsClient(s, 'viewer')
    const ws = wsSubscribe(client, 'subscription ($id: ID!) { runStatus(id: $id) { id } }', {
      id: String(runIds[1]),
    })
    await sse.until(() => true)
    await ws.until(() => true)
    await eventually(() => s.app.poller.listenerCount === 2)
    sse.stop()
    await eventually(() => s.app.poller.listenerCount === 1)
    await client.dispose()
    await eventually(() => s.app.poller.listenerCount === 0)
    expect(s.app.poller.runCount).toBe(0)
  })
})
