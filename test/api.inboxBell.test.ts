/**
 * The inbox's doorbell (src/api/inboxBell.ts, sql/inboxDoorbells.ts): a cue
 * parked by a runner in another process reaches this instance's inbox
 * subscribers at once, not at its next poll. The instances here poll their
 * inboxes every 20 s, so a cue within 2 s can only be the ring.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { announce, liveInboxDoorbells, pruneBefore, withdraw } from '../sql/inboxDoorbells.ts'
import { InboxBell } from '../src/api/inboxBell.ts'
import { createLogger } from '../src/log.ts'
import { createDefinition, startRun } from './helpers/consoleScene.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import {
  eventually,
  sleep,
  startSecondInstance,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

const POLL_MS = 20_000
const recently = () => new Date(Date.now() - 60_000)

describe('inbox doorbells, in SQL', () => {
  let t: TestDb
  let db: Db
  beforeAll(async () => {
    t = await createTestDb()
    db = t.open()
  })
  afterAll(async () => {
    await db?.close()
    await t?.drop()
  })

  it('lists the renewed doorbells but the asker’s own; a stale one is not rung, then forgotten', async () => {
    await announce(db, 'a', { connectionId: 11, server: 'db:3306' })
    await announce(db, 'b', { connectionId: 12, server: 'db:3306' })
    // Announced again from a new connection: the row moves, it is not added.
    await announce(db, 'b', { connectionId: 13, server: 'db:3306' })
    expect(await liveInboxDoorbells(db, recently(), 'a')).toEqual([
      { instanceId: 'b', connectionId: 13, server: 'db:3306' },
    ])
    expect((await liveInboxDoorbells(db, recently(), 'nobody')).map((b) => b.instanceId).sort()).toEqual([
      'a',
      'b',
    ])
    await db.run("UPDATE inbox_doorbells SET seen_at = NOW(3) - INTERVAL 2 MINUTE WHERE instance_id = 'a'")
    expect((await liveInboxDoorbells(db, recently(), 'nobody')).map((b) => b.instanceId)).toEqual(['b'])
    expect(await pruneBefore(db, recently())).toBe(1)
    await withdraw(db, 'b')
    expect(await liveInboxDoorbells(db, new Date(0), 'nobody')).toEqual([])
  })

  it('is up only while the inbox has subscribers, lingers, and is taken off the list when put away', async () => {
    let listening = false
    const bell = new InboxBell({
      db,
      instanceId: 'bell-unit',
      logger: createLogger({ level: 'silent' }),
      hasListeners: () => listening,
      onRing: () => {},
      checkMs: 50,
      lingerMs: 300,
    })
    const listed = async () => (await liveInboxDoorbells(db, recently(), 'nobody')).length
    bell.start()
    try {
      // Nobody listening: no doorbell, no row, no connection.
      await sleep(300)
      expect(bell.listening).toBe(false)
      expect(await listed()).toBe(0)
      listening = true
      await eventually(async () => ((await listed()) === 1 ? true : null), 5000)
      expect(bell.listening).toBe(true)
      // The last subscriber left: still up for the linger, then put away.
      listening = false
      await sleep(100)
      expect(await listed()).toBe(1)
      await eventually(async () => ((await listed()) === 0 ? true : null), 5000)
      expect(bell.listening).toBe(false)
      // Back, then stopped: off the list at once.
      listening = true
      await eventually(async () => ((await listed()) === 1 ? true : null), 5000)
    } finally {
      await bell.stop()
    }
    expect(await listed()).toBe(0)
  })
})

describe('a cue parked by a runner in another process', () => {
  let runnerInstance: TestServer
  let others: TestServer[]
  let definitionId: string

  beforeAll(async () => {
    runnerInstance = await startTestServer({ runner: true, env: { STATUS_POLL_MS: String(POLL_MS) } })
    others = [
      // An API-only instance, and another full one (its own runner parks nothing of these).
      await startSecondInstance(runnerInstance, {
        env: { STATUS_POLL_MS: String(POLL_MS), INSTANCE_ID: `bell-api-${process.pid}` },
      }),
      // It ticks once a minute, so the cue is parked by the first instance's
      // runner (nudged by the start), not by its own.
      await startSecondInstance(runnerInstance, {
        env: {
          RUNNER: 'on',
          TICK_MS: '60000',
          LEASE_MS: '120000',
          STATUS_POLL_MS: String(POLL_MS),
          INSTANCE_ID: `bell-full-${process.pid}`,
        },
      }),
    ]
    definitionId = await createDefinition(runnerInstance, {
      slug: 'cue-elsewhere',
      title: 'A cue parked elsewhere',
      program: { phases: [{ name: 'show', steps: [{ kind: 'core.cue', params: { prompt: 'Go?' } }] }] },
    })
  }, 60_000)
  afterAll(async () => {
    for (const o of others ?? []) await o.close()
    await runnerInstance?.close()
  })

  it('reaches the subscribers of every other instance within 2 s, by a ring', async () => {
    const clients = others.map((o) => wsClient(o, 'viewer'))
    const inboxes = clients.map((c) =>
      wsSubscribe<{ waitingSteps: { id: string; run: { id: string } }[] }>(
        c,
        'subscription { waitingSteps(limit: 10) { id run { id } } }',
      ),
    )
    try {
      for (const inbox of inboxes) await inbox.until((e) => e.data?.waitingSteps !== undefined)
      // Both doorbells are up and listed where the runner reads them.
      await eventually(
        async () =>
          (await liveInboxDoorbells(runnerInstance.app.db, recently(), runnerInstance.config.instanceId))
            .length === 2 || null,
        10_000,
      )
      const ringsBefore = others.map((o) => o.app.inboxBell.rings)
      const started = Date.now()
      const runId = await startRun(runnerInstance, definitionId, 'stage-1')
      await Promise.all(
        inboxes.map((inbox) =>
          inbox.until((e) => (e.data?.waitingSteps ?? []).some((s) => s.run.id === runId), 2000),
        ),
      )
      expect(Date.now() - started).toBeLessThan(2000)
      others.forEach((o, i) => {
        expect(o.app.inboxBell.rings).toBeGreaterThan(ringsBefore[i] as number)
      })
    } finally {
      for (const inbox of inboxes) inbox.stop()
      await Promise.all(clients.map((c) => c.dispose()))
    }
  }, 40_000)

  it('an instance stopping takes its doorbell off the list', async () => {
    const extra = await startSecondInstance(runnerInstance, {
      env: { STATUS_POLL_MS: String(POLL_MS), INSTANCE_ID: `bell-extra-${process.pid}` },
    })
    const client = wsClient(extra, 'viewer')
    const inbox = wsSubscribe(client, 'subscription { waitingSteps(limit: 10) { id } }')
    const ids = async () =>
      (await liveInboxDoorbells(runnerInstance.app.db, recently(), 'nobody')).map((b) => b.instanceId)
    try {
      await inbox.until((e) => e.data !== undefined)
      await eventually(
        async () => ((await ids()).includes(`bell-extra-${process.pid}`) ? true : null),
        10_000,
      )
    } finally {
      inbox.stop()
      await client.dispose()
      await extra.close()
    }
    expect(await ids()).not.toContain(`bell-extra-${process.pid}`)
  }, 40_000)
})
