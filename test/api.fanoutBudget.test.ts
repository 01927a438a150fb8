/**
 * The fan-out's work per change is bounded:
 * - a flood of materialised runs with many `runChanges` subscribers is handed
 *   out at most FANOUT_DELIVERIES_PER_POLL deliveries per poll, the rest an
 *   interval later, and still every subscriber gets every run (nothing
 *   dropped), while /healthz answers;
 * - the messages one socket sends in one turn of the event loop leave in one
 *   write: 100 subscriptions on a socket hearing one change cost a handful of
 *   socket writes, not 100.
 */
import net from 'node:net'
import type { Client } from 'graphql-ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import {
  type Collected,
  eventually,
  sleep,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

const RUN_CHANGES = 'subscription { runChanges { id status } }'
type RunEvent = { runChanges: { id: string; status: string } }
const INTERVAL = 100

/** Copies of run `templateId` with scopes flood-1..flood-n, all stamped now (a schedule materialising ahead). */
async function flood(db: Db, templateId: number, n: number): Promise<void> {
  const cols = (
    await db.query<{ c: string }>(
      `SELECT COLUMN_NAME AS c FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'event_runs' AND EXTRA NOT LIKE '%GENERATED%'
        ORDER BY ORDINAL_POSITION`,
    )
  )
    .map((r) => r.c)
    .filter((c) => !['id', 'scope', 'updated_at', 'created_at'].includes(c))
  await db.query(
    `INSERT INTO event_runs (scope, updated_at, created_at, ${cols.join(', ')})
     SELECT CONCAT('flood-', q.seq), NOW(3), NOW(3), ${cols.map((c) => `r.${c}`).join(', ')}
       FROM event_runs r JOIN seq_1_to_${n} q WHERE r.id = ?`,
    [templateId],
  )
}

describe('a flood of new runs', () => {
  let s: TestServer
  let elsewhere: Db
  let templateId = 0
  const BUDGET = 2000
  const SUBSCRIBERS = 20
  const RUNS = 1000
  beforeAll(async () => {
    s = await startTestServer({
      env: { STATUS_POLL_MS: String(INTERVAL), FANOUT_DELIVERIES_PER_POLL: String(BUDGET) },
    })
    elsewhere = s.t.open()
    const fx = await makeDefinition(elsewhere)
    templateId = (await makeRun(elsewhere, { definition: fx, scope: 'template' })).id
  })
  afterAll(async () => {
    await elsewhere?.close()
    await s?.close()
  })

  it('costs at most FANOUT_DELIVERIES_PER_POLL deliveries per poll, loses none, and /healthz answers meanwhile', async () => {
    const clients: Client[] = [wsClient(s, 'viewer'), wsClient(s, 'viewer')]
    const subs: Collected<RunEvent>[] = Array.from({ length: SUBSCRIBERS }, (_, i) =>
      wsSubscribe<RunEvent>(clients[i % 2] as Client, RUN_CHANGES),
    )
    try {
      await eventually(() => s.app.runChanges.listenerCount === SUBSCRIBERS, 10_000)
      await sleep(INTERVAL * 3)
      const before = { ...s.app.runChanges.deliveries }
      await flood(elsewhere, templateId, RUNS)
      const health: number[] = []
      const probing = (async () => {
        while (!subs.every((sub) => sub.events.length >= RUNS)) {
          const res = await fetch(`${s.url}/healthz`)
          health.push(res.status)
          await sleep(50)
        }
      })()
      await eventually(() => subs.every((sub) => sub.events.length >= RUNS), 30_000)
      await probing
      const d = s.app.runChanges.deliveries
      // Every subscriber got every new run, each once.
      for (const sub of subs) {
        const ids = new Set(sub.events.map((e) => e.data?.runChanges.id))
        expect(ids.size).toBe(RUNS)
      }
      expect(d.total - before.total).toBe(RUNS * SUBSCRIBERS)
      // ... spread over polls of at most the budget (20,000 at once without it).
      expect(d.mostInOnePoll).toBeLessThanOrEqual(BUDGET)
      expect(d.pollsCutByBudget - before.pollsCutByBudget).toBeGreaterThanOrEqual(
        RUNS / (BUDGET / SUBSCRIBERS) - 1,
      )
      expect(health.length).toBeGreaterThan(0)
      expect(health.every((status) => status === 200)).toBe(true)
    } finally {
      for (const sub of subs) sub.stop()
      await Promise.all(clients.map((c) => c.dispose()))
    }
  }, 60_000)
})

describe('socket writes', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({ env: { STATUS_POLL_MS: String(INTERVAL) } })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('100 subscriptions on one socket hearing one change cost a few writes, not 100', async () => {
    const port = Number(new URL(s.url).port)
    const writes = { count: 0 }
    const proto = net.Socket.prototype as unknown as Record<string, (...args: unknown[]) => unknown>
    const original = { write: proto._write, writev: proto._writev }
    const counting = (fn: ((...args: unknown[]) => unknown) | undefined) =>
      function (this: net.Socket, ...args: unknown[]) {
        // The server's side of a connection: its local port is the server's.
        if (this.localPort === port) writes.count++
        return fn?.apply(this, args)
      }
    const client = wsClient(s, 'viewer')
    const subs = Array.from({ length: 100 }, () => wsSubscribe<RunEvent>(client, RUN_CHANGES))
    try {
      await eventually(() => s.app.runChanges.listenerCount === 100, 10_000)
      await sleep(INTERVAL * 3)
      proto._write = counting(original.write)
      proto._writev = counting(original.writev)
      // One change (a new run), found by the next poll.
      const fx = await makeDefinition(s.t.db)
      await makeRun(s.t.db, { definition: fx })
      await eventually(() => subs.every((sub) => sub.events.length >= 1), 10_000)
      await sleep(INTERVAL * 2)
      const n = writes.count
      proto._write = original.write as (typeof proto)['_write']
      proto._writev = original.writev as (typeof proto)['_writev']
      expect(subs.every((sub) => sub.events.length === 1)).toBe(true)
      // 100 frames; without batching each was its own write.
      expect(n).toBeGreaterThan(0)
      expect(n).toBeLessThanOrEqual(5)
    } finally {
      proto._write = original.write as (typeof proto)['_write']
      proto._writev = original.writev as (typeof proto)['_writev']
      for (const sub of subs) sub.stop()
      await client.dispose()
    }
  }, 30_000)
})
