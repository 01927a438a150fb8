/**
 * The `runChanges` feed polls, and reads what it hands out, on a connection
 * of its own (src/pools.ts): here the API's only connection is held for
 * seconds, and a dashboard still gets a run changed elsewhere within a
 * second, with its definition. (On the API's pool, a show's answers held
 * the feed's reads back for 0.3–0.7 s at the p90.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { RunListRow } from '../sql/eventRuns/index.ts'
import { type DefinitionFixture, makeDefinition, makeRun } from './helpers/fixtures.ts'
import { type HeldPool, holdApiPool } from './helpers/heldPool.ts'
import { eventually, startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('the runChanges feed’s own connection', () => {
  let s: TestServer
  let elsewhere: Db
  let definition: DefinitionFixture
  let run: RunListRow

  beforeAll(async () => {
    // One API connection, so holding it leaves the API none.
    s = await startTestServer({ env: { STATUS_POLL_MS: '100', DB_POOL_SIZE: '1' } })
    elsewhere = s.t.open()
    definition = await makeDefinition(elsewhere)
    run = await makeRun(elsewhere, { definition })
  }, 60_000)
  afterAll(async () => {
    await elsewhere?.close()
    await s?.close()
  })

  it('a run changed while the API’s pool is held still reaches a dashboard within a second, with its definition', async () => {
    expect(s.app.changesDb).not.toBe(s.app.db)
    type Change = { runChanges: { id: string; status: string; definition: { slug: string } } }
    const client = wsClient(s, 'viewer')
    const board = wsSubscribe<Change>(client, 'subscription { runChanges { id status definition { slug } } }')
    let pool: HeldPool | null = null
    try {
      await eventually(() => s.app.runChanges.listenerCount === 1)
      await sleep(300)
      pool = await holdApiPool(s)
      const changedAt = Date.now()
      await elsewhere.run(`UPDATE event_runs SET status = 'running', updated_at = NOW(3) WHERE id = ?`, [
        run.id,
      ])
      const event = await board.until((e) => e.data?.runChanges.id === String(run.id), 1000)
      expect(Date.now() - changedAt).toBeLessThan(1000)
      expect(event.data?.runChanges).toMatchObject({
        status: 'RUNNING',
        definition: { slug: definition.def.slug },
      })
      // The API is still waiting for its connection all the while.
      expect(await pool.apiIsWaiting()).toBe(true)
    } finally {
      await pool?.release()
      board.stop()
      await client.dispose()
    }
  }, 30_000)
})
