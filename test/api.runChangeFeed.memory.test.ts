/**
 * A long-lived `runChanges` subscription keeps no memory per delivery: a
 * dashboard open all day receives hundreds of thousands of changes. (Each
 * delivery used to race the subscription's pending stop promise, which kept
 * a reaction, about 300 bytes, per delivery until the subscription ended.)
 * The feed runs on a real database; changes are handed to its listener
 * directly, so the figure is the stream's own cost and not the polls'.
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { RunListRow } from '../sql/eventRuns/index.ts'
import { createLoaders } from '../src/api/loaders.ts'
import { RunChangeFeed, type RunChangeListener } from '../src/api/runChangeFeed.ts'
import { NO_FILTER } from '../src/api/runFilter.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { makeRun } from './helpers/fixtures.ts'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

describe('a runChanges subscription over 200,000 deliveries', () => {
  let t: TestDb
  beforeAll(async () => {
    t = await createTestDb()
  })
  afterAll(async () => {
    await t?.drop()
  })

  it('keeps its heap flat (well under the 60 MB a per-delivery reaction would hold)', async () => {
    const run = await makeRun(t.db)
    const feed = new RunChangeFeed({ db: t.db, intervalMs: 600_000 })
    const stream = await feed.watch(NO_FILTER)
    const iterator = stream[Symbol.asyncIterator]()
    // The stream starts (and listens) at its first pull.
    let pulled = iterator.next()
    const listener = [...(feed as unknown as { listeners: Set<RunChangeListener> }).listeners][0]
    if (!listener) throw new Error('the subscription registered no listener')
    const loaders = createLoaders(t.db)
    const deliver = async (n: number) => {
      for (let i = 0; i < n; i++) {
        listener.onChange({ run: { ...run, id: i % 50 } as RunListRow, loaders })
        const next = await pulled
        if (next.done) throw new Error('the stream ended early')
        pulled = iterator.next()
      }
    }
    try {
      await deliver(5000) // warm: code compiled, maps grown
      gc()
      const before = process.memoryUsage().heapUsed
      await deliver(200_000)
      gc()
      const grownMb = (process.memoryUsage().heapUsed - before) / 2 ** 20
      console.log(`[runChanges] heap grew ${grownMb.toFixed(1)} MB over 200,000 deliveries`)
      expect(grownMb).toBeLessThan(15)
    } finally {
      await iterator.return?.()
      await feed.close()
    }
  }, 120_000)
})
