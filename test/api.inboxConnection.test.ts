/**
 * The cue inbox polls on a connection of its own (src/pools.ts), so a cue the
 * runner parks reaches its person while the API's pool is busy: here the
 * API's only connection is held for seconds, and a `waitingSteps` subscriber
 * still gets a cue parked elsewhere within a second, with its run's definition
 * (read on the inbox's connection too). Under a storm of wakes
 * (cues parking all through a show) the inbox polls at most once per
 * INBOX_MIN_GAP_MS. And the pools: who opens what, and who closes it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { INBOX_MIN_GAP_MS } from '../src/api/inboxFeed.ts'
import { loadConfig } from '../src/config.ts'
import { openPools } from '../src/pools.ts'
import { createTestDb } from './helpers/db.ts'
import { type DefinitionFixture, makeDefinition, makeRunWithSteps } from './helpers/fixtures.ts'
import { type HeldPool, holdApiPool } from './helpers/heldPool.ts'
import { startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('the inbox’s own connection', () => {
  let s: TestServer
  let elsewhere: Db
  const cues: StepRow[] = []
  let definition: DefinitionFixture

  beforeAll(async () => {
    // One API connection, so holding it leaves the API none.
    s = await startTestServer({ env: { STATUS_POLL_MS: '100', DB_POOL_SIZE: '1' } })
    elsewhere = s.t.open()
    definition = await makeDefinition(elsewhere)
    for (let i = 0; i < 2; i++) {
      const { steps } = await makeRunWithSteps(elsewhere, 1, { definition })
      cues.push(steps[0] as StepRow)
    }
  }, 60_000)
  afterAll(async () => {
    await elsewhere?.close()
    await s?.close()
  })

  type Cue = { id: string; run: { definition: { slug: string } } }
  const subscriptions = [
    {
      name: 'waitingSteps',
      query: 'subscription { waitingSteps(limit: 10) { id run { definition { slug } } } }',
      cues: (data: Record<string, unknown>) => (data.waitingSteps ?? []) as Cue[],
    },
    {
      name: 'waitingStepChanges',
      query: 'subscription { waitingStepChanges(limit: 10) { added { id run { definition { slug } } } } }',
      cues: (data: Record<string, unknown>) =>
        ((data.waitingStepChanges as { added: Cue[] } | undefined)?.added ?? []) as Cue[],
    },
  ]

  it.each(subscriptions.map((sub, i) => [sub.name, i] as const))(
    'a cue parked while the API’s pool is held still reaches a %s subscriber within a second, with its definition',
    async (_name, i) => {
      const sub = subscriptions[i] as (typeof subscriptions)[number]
      const cue = cues[i] as StepRow
      const client = wsClient(s, 'viewer')
      const inbox = wsSubscribe<Record<string, unknown>>(client, sub.query)
      let pool: HeldPool | null = null
      try {
        // The first inbox is read on the API's pool; from here on, its polls.
        await inbox.until((e) => e.data !== undefined)
        pool = await holdApiPool(s)
        const parkedAt = Date.now()
        await elsewhere.query(
          `UPDATE event_run_steps SET status = 'running', parked = 1, started_at = NOW(3), updated_at = NOW(3)
         WHERE id = ?`,
          [cue.id],
        )
        // Its run's definition is not among what the first inbox read: the
        // poll's loaders read it, on the inbox's connection, not the held one.
        const event = await inbox.until(
          (e) => (e.data ? sub.cues(e.data) : []).some((c) => c.id === String(cue.id)),
          1000,
        )
        expect(Date.now() - parkedAt).toBeLessThan(1000)
        const delivered = sub.cues(event.data ?? {}).find((c) => c.id === String(cue.id))
        expect(delivered?.run.definition.slug).toBe(definition.def.slug)
        // The API is still waiting for its connection all the while.
        expect(await pool.apiIsWaiting()).toBe(true)
      } finally {
        await pool?.release()
        inbox.stop()
        await client.dispose()
      }
    },
    30_000,
  )

  it('polls at most once per INBOX_MIN_GAP_MS however often it is woken', async () => {
    const client = wsClient(s, 'viewer')
    const inbox = wsSubscribe(client, 'subscription { waitingSteps(limit: 10) { id } }')
    try {
      await inbox.until((e) => e.data !== undefined)
      const before = s.app.inbox.polls
      const started = Date.now()
      while (Date.now() - started < 1000) {
        s.app.inbox.wake()
        await sleep(5)
      }
      const polls = s.app.inbox.polls - before
      const elapsed = Date.now() - started
      // Woken all the time: one poll per gap, give or take the one in flight.
      expect(polls).toBeGreaterThanOrEqual(Math.floor(elapsed / INBOX_MIN_GAP_MS) - 3)
      expect(polls).toBeLessThanOrEqual(Math.ceil(elapsed / INBOX_MIN_GAP_MS) + 1)
    } finally {
      inbox.stop()
      await client.dispose()
    }
  })
})

describe('openPools', () => {
  it('opens the API’s pool, the runner’s, and the inbox’s and the change feed’s connections on a URL, and closes them all', async () => {
    const t = await createTestDb({ migrate: false })
    try {
      const config = loadConfig({ DATABASE_URL: t.url })
      const pools = openPools(config, {})
      const all = [pools.db, pools.runnerDb, pools.inboxDb, pools.changesDb]
      expect(new Set(all).size).toBe(4)
      for (const db of all) expect(await db?.ping()).toBe(true)
      await pools.close()
      for (const db of all) expect(await db?.ping()).toBe(false)

      const apiOnly = openPools(loadConfig({ DATABASE_URL: t.url, RUNNER: 'off' }), {})
      expect(apiOnly.runnerDb).toBeNull()
      expect(apiOnly.inboxDb).not.toBe(apiOnly.db)
      expect(apiOnly.changesDb).not.toBe(apiOnly.db)
      await apiOnly.close()
    } finally {
      await t.drop()
    }
  })

  it('with a pool passed in and no URL, uses it for everything and leaves it open', async () => {
    const t = await createTestDb({ migrate: false })
    try {
      const given = t.open()
      const pools = openPools(loadConfig({}), { db: given })
      expect(pools.db).toBe(given)
      expect(pools.runnerDb).toBe(given)
      expect(pools.inboxDb).toBe(given)
      expect(pools.changesDb).toBe(given)
      await pools.close()
      expect(await given.ping()).toBe(true)
      await given.close()
      expect(() => openPools(loadConfig({}), {})).toThrow(/DATABASE_URL/)
    } finally {
      await t.drop()
    }
  })
})
