/**
 * How fast a parked cue reaches its owner's `waitingSteps(mine: true)`, and
 * what a poll of many owners' inboxes costs:
 *
 * - a cue parked by the co-hosted runner is pushed to its owner over a real
 *   graphql-ws socket as soon as the park is written, while the rest of its
 *   batch (a webhook held open by the receiver) is still advancing, on a
 *   server whose feeds poll every 30 s and whose runner ticks every 30 s: it
 *   used to wait for the batch to end (or the next pass);
 * - twenty owners, each subscribed to their own inbox, are polled together:
 *   one statement reads which cues wait for anybody, then two the new cues
 *   and their runs in full, where each owner's inbox was read in turn (twenty
 *   round trips, and twenty reads of runs); a later poll reads in full only
 *   the cues parked since.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { SETTLED_MS } from '../sql/waitingCues.ts'
import { type Inbox, InboxFeed } from '../src/api/inboxFeed.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { makeDefinition, makeRun, makeRunWithSteps } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver, waitFor } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const INBOX = `subscription { waitingSteps(limit: 500, mine: true) { id startedAt run { id definition { slug } } } }`
type InboxEvent = { waitingSteps: { id: string; startedAt: string | null; run: { id: string } }[] }
const LONG_MS = '30000'

describe('a cue parked by this server’s runner (feeds and runner at 30 s)', () => {
  let receiver: WebhookReceiver
  let s: TestServer
  beforeAll(async () => {
    receiver = await startReceiver()
    receiver.route('/held', () => ({ hold: true }))
    s = await startTestServer({
      runner: true,
      env: {
        STATUS_POLL_MS: LONG_MS,
        TICK_MS: LONG_MS,
        LEASE_MS: '60000',
        WEBHOOK_ALLOW: `${receiver.url}/`,
      },
    })
  })
  afterAll(async () => {
    receiver?.releaseHeld()
    await s?.close()
    await receiver?.close()
  })

  it('reaches its owner’s inbox while the rest of its batch is still advancing', async () => {
    const who = await s.gql<{ viewer: { name: string } }>('{ viewer { name } }', { auth: 'operator' })
    const me = who.body.data?.viewer.name as string
    expect(me).toBeTruthy()
    const cueShow = await makeDefinition(s.t.db, {
      program: {
        phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'GO?', assignee: me } }] }],
      },
    })
    const slowShow = await makeDefinition(s.t.db, {
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.webhook', params: { url: `${receiver.url}/held/{{run.scope}}`, body: {} } },
            ],
          },
        ],
      },
    })
    const client = wsClient(s, 'operator')
    const mine = wsSubscribe<InboxEvent>(client, INBOX)
    try {
      await mine.until((e) => Array.isArray(e.data?.waitingSteps))
      expect(mine.events[0]?.data?.waitingSteps).toEqual([])
      // Both runs due at one instant, written straight to the database (no
      // mutation, so nothing but the runner can wake the inbox), so one pass
      // claims them and one batch advances them together.
      const instant = new Date(Date.now() + 1500)
      const cueRun = await makeRun(s.t.db, { definition: cueShow, scope: 'stage', scheduledFor: instant })
      await makeRun(s.t.db, { definition: slowShow, scope: 'hold', scheduledFor: instant })
      // A pass now finds nothing due and aims its sleep at the instant.
      s.app.runner?.nudge()
      const polls0 = s.app.inbox.polls

      const got = await mine.until((e) => (e.data?.waitingSteps.length ?? 0) > 0, 10_000)
      const deliveredAt = Date.now()
      const cue = got.data?.waitingSteps[0]
      expect(cue?.run.id).toBe(String(cueRun.id))
      // Its batch has not ended: the other run's webhook is still held open.
      expect(receiver.pending()).toHaveLength(1)
      const parkedFor = deliveredAt - Date.parse(cue?.startedAt ?? '')
      console.log(`cue parked → its owner: ${parkedFor} ms, ${s.app.inbox.polls - polls0} inbox polls`)
      // Pushed at the park's write: far sooner than the 30 s poll, tick or the held webhook.
      expect(parkedFor).toBeLessThan(3000)
    } finally {
      receiver.releaseHeld()
      mine.stop()
      await client.dispose()
    }
    await waitFor(async () => {
      const rows = await s.t.db.query<{ n: number }>(
        "SELECT COUNT(*) AS n FROM event_runs WHERE status IN ('running', 'starting')",
      )
      return Number(rows[0]?.n) <= 1 || null
    })
  }, 30_000)
})

describe('twenty owners’ inboxes in one poll', () => {
  const OWNERS = 20
  let t: TestDb
  let db: Db
  beforeAll(async () => {
    t = await createTestDb()
    db = t.db
  })
  afterAll(async () => {
    await t?.drop()
  })

  /** A cue parked now, assigned to `owner`. */
  async function parkCue(owner: string): Promise<StepRow> {
    const fx = await makeDefinition(db)
    const { steps } = await makeRunWithSteps(db, 1, { definition: fx })
    const step = steps[0] as StepRow
    await db.query(
      `UPDATE event_run_steps SET status = 'running', parked = 1, started_at = NOW(3) WHERE id = ?`,
      [step.id],
    )
    await db.query(
      `INSERT INTO cue_ladders (step_id, run_id, prompt, opened_at, assignees)
       SELECT id, run_id, 'Yours', started_at, JSON_ARRAY(?) FROM event_run_steps WHERE id = ?`,
      [owner, step.id],
    )
    return step
  }

  it('one read serves every owner’s inbox and their runs; each owner gets exactly their own cue', async () => {
    const feed = new InboxFeed({ db, intervalMs: 60_000 })
    const owners = Array.from({ length: OWNERS }, (_, i) => `op-${i}`)
    const latest = new Map<string, Inbox>()
    const streams = await Promise.all(owners.map((o) => feed.watch(500, [o, `team:crew-${o}`])))
    const reading = streams.map(async (stream, i) => {
      for await (const inbox of stream) latest.set(owners[i] as string, inbox)
    })
    try {
      await waitFor(() => latest.size === OWNERS || null)
      for (const inbox of latest.values()) expect(inbox.steps).toEqual([])
      latest.clear()

      const cues = new Map<string, number>()
      for (const o of owners) cues.set(o, (await parkCue(o)).id)
      const statements0 = db.stats.statements
      const polls0 = feed.polls
      feed.wake()
      await waitFor(() => latest.size === OWNERS || null)
      const statements = db.stats.statements - statements0
      expect(feed.polls - polls0).toBe(1)
      for (const o of owners) expect(latest.get(o)?.steps.map((st) => st.id)).toEqual([cues.get(o)])
      // Read in turn, the twenty inboxes were twenty statements and their runs forty more
      // (getByIds is the runs and their waiting counts): 60. Now three on one connection:
      // the waiting cues, the new steps, their runs.
      expect(statements).toBeLessThanOrEqual(3)
      // Every owner's runs come from that one read: `run` resolves without a statement.
      const inbox = latest.get('op-3') as Inbox
      const before = db.stats.statements
      const run = await inbox.loaders.run.load(inbox.steps[0]?.runId as number)
      expect(run?.id).toBe(inbox.steps[0]?.runId)
      expect(db.stats.statements).toBe(before)

      // Once the rows have settled, a poll keeps its copies of them and reads in
      // full only a cue parked since: one step and one run, not twenty-one of each.
      const reads = feed.waitingCues.fullReads
      expect(reads).toEqual({ steps: OWNERS, runs: OWNERS })
      await new Promise((r) => setTimeout(r, SETTLED_MS + 300))
      // Read fresh, the copies were not kept; read settled, they are.
      feed.wake()
      await waitFor(() => reads.steps === 2 * OWNERS || null)
      expect(reads.runs).toBe(2 * OWNERS)
      latest.clear()
      const late = (await parkCue('op-0')).id
      feed.wake()
      await waitFor(() => latest.get('op-0') ?? null)
      expect(latest.get('op-0')?.steps.map((st) => st.id)).toEqual([cues.get('op-0'), late])
      expect(latest.size).toBe(1) // nobody else's inbox changed
      expect(reads).toEqual({ steps: 2 * OWNERS + 1, runs: 2 * OWNERS + 1 })
    } finally {
      await feed.close()
      await Promise.all(reading)
    }
  }, 30_000)
})
