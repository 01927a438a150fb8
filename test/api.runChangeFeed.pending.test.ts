/**
 * What a `runChanges` subscriber that falls behind is handed, and what a poll
 * costs the feed's connection:
 * - a run already waiting for the subscriber keeps its place in the line with
 *   its newest state (moved to the back, a run that kept changing waited
 *   behind the whole backlog for as long as it changed);
 * - the changes' definitions are read in one statement per poll, before the
 *   subscribers take them (left to the loader, each definition cost a read of
 *   its own and every stream waited for it);
 * - however often this process wakes it, the feed polls at most once per
 *   CHANGES_MIN_GAP_MS;
 * - its subscribers together take at most `deliveriesPerSecond` changes a
 *   second, and a change waiting for its turn folds into the run's newest
 *   state, lost to nobody.
 * The feed runs on a real database.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createDb, type Db } from '../sql/db.ts'
import type { RunListRow } from '../sql/eventRuns/index.ts'
import { DeliveryPace } from '../src/api/deliveryPace.ts'
import { createLoaders } from '../src/api/loaders.ts'
import {
  CHANGES_MIN_GAP_MS,
  type RunChange,
  RunChangeFeed,
  type RunChangeListener,
} from '../src/api/runChangeFeed.ts'
import { NO_FILTER } from '../src/api/runFilter.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { eventually } from './helpers/server.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('the runChanges feed', () => {
  let t: TestDb
  beforeAll(async () => {
    t = await createTestDb()
  })
  afterAll(async () => {
    await t?.drop()
  })

  it('keeps a waiting run in its place with its newest state', async () => {
    const base = await makeRun(t.db)
    const feed = new RunChangeFeed({ db: t.db, intervalMs: 600_000 })
    const stream = await feed.watch(NO_FILTER)
    const iterator = stream[Symbol.asyncIterator]()
    try {
      // The stream starts (and listens) at its first pull.
      const first = iterator.next()
      const listener = [...(feed as unknown as { listeners: Set<RunChangeListener> }).listeners][0]
      if (!listener) throw new Error('the subscription registered no listener')
      const loaders = createLoaders(t.db)
      const change = (id: number, status: RunListRow['status']): RunChange => ({
        run: { ...base, id, status } as RunListRow,
        loaders,
      })
      listener.onChange(change(1, 'running'))
      expect((await first).value?.run.id).toBe(1)
      // Nobody pulls while run 2 changes, then run 3, then run 2 again.
      listener.onChange(change(2, 'running'))
      listener.onChange(change(3, 'running'))
      listener.onChange(change(2, 'completed'))
      const handed: string[] = []
      for (let i = 0; i < 2; i++) {
        const next = await iterator.next()
        handed.push(`${next.value?.run.id}:${next.value?.run.status}`)
      }
      expect(handed).toEqual(['2:completed', '3:running'])
    } finally {
      await iterator.return?.()
      await feed.close()
    }
  })

  it('reads the definitions of a poll’s changes in one statement, before the subscribers take them', async () => {
    const counted: Db = createDb(t.url, { connectionLimit: 2 })
    const definitions = await Promise.all([0, 1, 2, 3].map(() => makeDefinition(t.db)))
    const made = await Promise.all(definitions.map((definition) => makeRun(t.db, { definition })))
    const feed = new RunChangeFeed({ db: counted, intervalMs: 100 })
    const stream = await feed.watch(NO_FILTER)
    const iterator = stream[Symbol.asyncIterator]()
    const slugs: string[] = []
    const pulling = (async () => {
      for (;;) {
        const next = await iterator.next()
        if (next.done) return
        const definition = await next.value.loaders.definition.load(next.value.run.definitionId)
        slugs.push(definition?.slug ?? '?')
      }
    })()
    try {
      await eventually(() => feed.polls >= 2)
      await sleep(250)
      // One poll finds the four runs changed (elsewhere, in one statement).
      const before = counted.stats.statements
      const pollsBefore = feed.polls
      await t.db.run(
        `UPDATE event_runs SET status = 'running', updated_at = NOW(3) WHERE id IN (${made.map(() => '?').join(', ')})`,
        made.map((r) => r.id),
      )
      await eventually(() => slugs.length >= 4, 5000)
      const polls = feed.polls - pollsBefore
      expect(new Set(slugs)).toEqual(new Set(definitions.map((d) => d.def.slug)))
      // Each poll: its read of what changed. The one that found them: the runs
      // whole (their rows, then their cue counts) and one read of the four definitions.
      expect(counted.stats.statements - before).toBeLessThanOrEqual(polls + 3)
    } finally {
      await iterator.return?.()
      await feed.close()
      await pulling
      await counted.close()
    }
  })

  it(`polls at most once per ${CHANGES_MIN_GAP_MS} ms however often it is woken`, async () => {
    const feed = new RunChangeFeed({ db: t.db, intervalMs: 2000 })
    const stream = await feed.watch(NO_FILTER)
    const iterator = stream[Symbol.asyncIterator]()
    const pulled = iterator.next()
    try {
      const before = feed.polls
      const started = Date.now()
      while (Date.now() - started < 1500) {
        feed.wake()
        await sleep(5)
      }
      const polls = feed.polls - before
      const elapsed = Date.now() - started
      expect(polls).toBeGreaterThanOrEqual(Math.floor(elapsed / CHANGES_MIN_GAP_MS) - 2)
      expect(polls).toBeLessThanOrEqual(Math.ceil(elapsed / CHANGES_MIN_GAP_MS) + 1)
    } finally {
      await iterator.return?.()
      await feed.close()
      await pulled
    }
  })

  it('hands its subscribers at most deliveriesPerSecond changes a second, the waiting ones as their newest state', async () => {
    const RATE = 100
    const RUNS = 250
    const base = await makeRun(t.db)
    const feed = new RunChangeFeed({ db: t.db, intervalMs: 600_000, deliveriesPerSecond: RATE })
    const streams = await Promise.all([feed.watch(NO_FILTER), feed.watch(NO_FILTER)])
    const got: [string[], string[]] = [[], []]
    const pulling = streams.map(async (stream, i) => {
      for await (const change of stream) got[i]?.push(`${change.run.id}:${change.run.status}`)
    })
    try {
      await eventually(() => (feed as unknown as { listeners: Set<RunChangeListener> }).listeners.size === 2)
      const listeners = [...(feed as unknown as { listeners: Set<RunChangeListener> }).listeners]
      const loaders = createLoaders(t.db)
      const started = performance.now()
      for (let id = 1; id <= RUNS; id++) {
        for (const l of listeners)
          l.onChange({ run: { ...base, id, status: 'running' } as RunListRow, loaders })
      }
      await sleep(1000)
      const inTheFirstSecond = got[0].length + got[1].length
      // The bucket's second, and a second's refill.
      expect(inTheFirstSecond).toBeLessThanOrEqual(2 * RATE + 10)
      expect(inTheFirstSecond).toBeGreaterThanOrEqual(RATE)
      // Run 250 moves on while it waits: the subscribers get its newest state, once.
      for (const l of listeners)
        l.onChange({ run: { ...base, id: RUNS, status: 'completed' } as RunListRow, loaders })
      await eventually(() => got.every((g) => g.length >= RUNS), 15_000)
      const elapsed = performance.now() - started
      expect(elapsed).toBeGreaterThanOrEqual(((2 * RUNS - RATE) / RATE) * 1000 - 200)
      for (const g of got) {
        expect(g).toHaveLength(RUNS)
        expect(new Set(g.map((x) => x.split(':')[0])).size).toBe(RUNS)
        expect(g).toContain(`${RUNS}:completed`)
        expect(g).not.toContain(`${RUNS}:running`)
      }
    } finally {
      await feed.close()
      await Promise.all(pulling)
    }
  })

  it('ends a subscription that arrives after it closed, paced or not', async () => {
    for (const deliveriesPerSecond of [0, 100]) {
      const feed = new RunChangeFeed({ db: t.db, intervalMs: 600_000, deliveriesPerSecond })
      await feed.ready()
      await feed.close()
      const stream = await feed.watch(NO_FILTER)
      expect(await stream[Symbol.asyncIterator]().next()).toEqual({ done: true, value: undefined })
    }
  })
})

describe('DeliveryPace', () => {
  it('lets a second’s worth go at once, then one per 1/rate, and says how long to wait', () => {
    let now = 0
    const pace = new DeliveryPace(10, () => now)
    for (let i = 0; i < 10; i++) expect(pace.take()).toBe(0)
    expect(pace.take()).toBe(100)
    now = 50
    expect(pace.take()).toBe(50)
    now = 100
    expect(pace.take()).toBe(0)
    expect(pace.take()).toBe(100)
    // A long quiet spell refills one second's worth, no more.
    now = 60_000
    for (let i = 0; i < 10; i++) expect(pace.take()).toBe(0)
    expect(pace.take()).toBeGreaterThan(0)
  })
})
