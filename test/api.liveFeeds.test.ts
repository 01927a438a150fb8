/**
 * `runChanges` and `waitingSteps` through real sockets (graphql-ws, and SSE):
 *
 * - on a server whose poll interval is 30 s, a run started over the API, driven
 *   by this server's runner to its cue, answered over the API and finished,
 *   reaches subscribers at every step well before any poll: changes made here
 *   are pushed at once; each filter sees only its runs (and a run leaving a
 *   status filter once more); the inbox is re-sent on each change;
 * - on a server polling every 150 ms with no runner, a change written by
 *   "another instance" (straight to the database) arrives within the interval,
 *   so does one whose transaction commits after newer changes were seen, a
 *   claim-like update that changes nothing a subscriber sees is not sent, and
 *   2,000 subscribers of each kind cost one statement per interval per kind;
 *   nobody listening costs none;
 * - no token, no subscription.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { SETTLED_MS } from '../sql/waitingCues.ts'
import { makeDefinition, makeRun, makeRunWithSteps } from './helpers/fixtures.ts'
import {
  type Collected,
  eventually,
  SESSION_PROGRAM,
  sleep,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

interface RunEvent {
  runChanges: {
    id: string
    status: string
    currentPhase: string | null
    waitingSteps: number
    health: string
  }
}
interface InboxEvent {
  waitingSteps: { id: string; kind: string; run: { id: string; status: string } }[]
}

const RUN_CHANGES = `subscription ($filter: RunFilter) {
  runChanges(filter: $filter) { id status currentPhase waitingSteps health definition { id } }
}`
const INBOX = `subscription ($limit: Int) { waitingSteps(limit: $limit) { id kind run { id status } } }`

const runOf = (e: { data?: RunEvent | null }) => e.data?.runChanges

describe('changes made through this server are pushed at once (poll interval 30 s)', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({ runner: true, env: { STATUS_POLL_MS: '30000' } })
  })
  afterAll(async () => {
    await s?.close()
  })

  async function createDefinition(slug: string): Promise<string> {
    const r = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!, $slug: String!) { createDefinition(input: { slug: $slug, title: "Live", program: $p }) { id } }',
      { variables: { p: SESSION_PROGRAM, slug } },
    )
    return r.body.data?.createDefinition.id as string
  }

  it('a run started, parked on its cue, answered and finished reaches the right subscribers at every step', async () => {
    const show = await createDefinition('live-show')
    const other = await createDefinition('live-other')
    const client = wsClient(s, 'viewer')
    const everything = wsSubscribe<RunEvent>(client, RUN_CHANGES, { filter: { definitionId: show } })
    const elsewhere = wsSubscribe<RunEvent>(client, RUN_CHANGES, { filter: { definitionId: other } })
    const running = wsSubscribe<RunEvent>(client, RUN_CHANGES, { filter: { statuses: ['RUNNING'] } })
    const ended = wsSubscribe<RunEvent>(client, RUN_CHANGES, {
      filter: { definitionId: show, statuses: ['COMPLETED', 'FAILED', 'CANCELLED'] },
    })
    const inbox = wsSubscribe<InboxEvent>(client, INBOX, { limit: 10 })
    try {
      // The inbox comes at once (empty); runChanges sends nothing until something changes.
      await inbox.until((e) => Array.isArray(e.data?.waitingSteps))
      expect(inbox.events[0]?.data?.waitingSteps).toEqual([])
      await sleep(300)
      expect(everything.events).toEqual([])
      const started = Date.now()

      const start = await s.gql<{ startRun: { id: string } }>(
        `mutation { startRun(definitionId: "${show}") { id } }`,
        { auth: 'operator' },
      )
      const runId = start.body.data?.startRun.id as string
      expect(runId).toMatch(/^\d+$/)
      // The runner starts it and parks it on its cue; the tick's end wakes the feeds.
      await everything.until((e) => runOf(e)?.id === runId && runOf(e)?.waitingSteps === 1, 5000)
      expect(runOf(everything.events.at(-1) ?? {})).toMatchObject({
        status: 'RUNNING',
        currentPhase: 'opening',
      })
      await running.until((e) => runOf(e)?.id === runId && runOf(e)?.status === 'RUNNING', 5000)
      const parked = await inbox.until((e) => (e.data?.waitingSteps.length ?? 0) === 1, 5000)
      const cue = parked.data?.waitingSteps[0]
      expect(cue).toMatchObject({ kind: 'core.cue', run: { id: runId, status: 'RUNNING' } })

      // Answered over the API: the inbox empties, the count drops, the run finishes.
      const answered = await s.gql(`mutation { resolveCue(stepId: "${cue?.id}", note: "go") { applied } }`, {
        auth: 'operator',
      })
      expect(answered.body.data).toEqual({ resolveCue: { applied: true } })
      await inbox.until((e) => e.data?.waitingSteps.length === 0 && e !== inbox.events[0], 5000)
      await everything.until((e) => runOf(e)?.id === runId && runOf(e)?.waitingSteps === 0, 5000)
      await everything.until((e) => runOf(e)?.status === 'COMPLETED', 8000)
      await ended.until((e) => runOf(e)?.status === 'COMPLETED', 1000)
      // The RUNNING-only subscriber hears the run leave its filter, once: as ENDING
      // (its wrap-up phase) or, if that was over before a look, as COMPLETED.
      await running.until((e) => runOf(e)?.id === runId && runOf(e)?.status !== 'RUNNING', 1000)
      // Everything arrived before the first poll could have run: each was pushed.
      expect(Date.now() - started).toBeLessThan(25_000)
      expect(s.app.runChanges.polls).toBeGreaterThan(0)

      // Filters: nothing of this run for the other show; only the end for `ended`.
      expect(elsewhere.events).toEqual([])
      expect(ended.events.map((e) => runOf(e)?.status)).toEqual(['COMPLETED'])
      const left = running.events.map((e) => runOf(e)?.status).filter((st) => st !== 'RUNNING')
      expect(left).toHaveLength(1)
      expect(['ENDING', 'COMPLETED']).toContain(left[0])
      // Every event is a change: no two consecutive events of the run look the same.
      const seen = everything.events.map((e) => JSON.stringify(runOf(e)))
      for (let i = 1; i < seen.length; i++) expect(seen[i]).not.toBe(seen[i - 1])
      expect(everything.events.some((e) => e.errors)).toBe(false)
    } finally {
      for (const sub of [everything, elsewhere, running, ended, inbox]) sub.stop()
      await client.dispose()
    }
  })

  it('pausing and cancelling over the API are pushed too, and each event carries fresh nested fields', async () => {
    const show = await createDefinition('live-controls')
    const client = wsClient(s, 'viewer')
    const sub = wsSubscribe<{ runChanges: { id: string; status: string; steps: { status: string }[] } }>(
      client,
      'subscription ($f: RunFilter) { runChanges(filter: $f) { id status steps { status } } }',
      { f: { definitionId: show } },
    )
    try {
      await sleep(200)
      const start = await s.gql<{ startRun: { id: string } }>(
        `mutation { startRun(definitionId: "${show}") { id } }`,
        { auth: 'operator' },
      )
      const runId = start.body.data?.startRun.id as string
      await eventually(async () => {
        const r = await s.gql<{ run: { waitingSteps: number } }>(`{ run(id: "${runId}") { waitingSteps } }`)
        return r.body.data?.run.waitingSteps === 1
      })
      const t0 = Date.now()
      await s.gql(`mutation { pauseRun(id: "${runId}") { applied } }`, { auth: 'operator' })
      await sub.until((e) => e.data?.runChanges.status === 'PAUSED', 3000)
      await s.gql(`mutation { cancelRun(id: "${runId}", reason: "test") { applied } }`, { auth: 'operator' })
      const cancelled = await sub.until((e) => e.data?.runChanges.status === 'CANCELLED', 3000)
      expect(Date.now() - t0).toBeLessThan(3000)
      // Steps are read per event, not cached from the first one.
      expect(cancelled.data?.runChanges.steps.some((st) => st.status === 'CANCELLED')).toBe(true)
    } finally {
      sub.stop()
      await client.dispose()
    }
  })
})

describe('changes made elsewhere, and the cost of many subscribers (poll interval 150 ms, no runner)', () => {
  const INTERVAL = 150
  let s: TestServer
  /** Another instance's pool: its writes do not signal this server. */
  let elsewhere: Db
  let showId = 0
  let fx: Awaited<ReturnType<typeof makeDefinition>>
  beforeAll(async () => {
    // 4,000 subscriptions of one viewer below: past SUBSCRIPTIONS_PER_PRINCIPAL's default (200).
    s = await startTestServer({
      env: { STATUS_POLL_MS: String(INTERVAL), SUBSCRIPTIONS_PER_PRINCIPAL: '10000' },
    })
    elsewhere = s.t.open()
    fx = await makeDefinition(s.t.db)
    showId = fx.def.id
  })
  afterAll(async () => {
    await s?.close()
  })

  it('a change written by another instance arrives within the interval (SSE); a claim renewal is not news', async () => {
    const run = await makeRun(elsewhere, { definition: fx })
    const sub = sseSubscribe<RunEvent>(s, RUN_CHANGES, { filter: { definitionId: String(showId) } }, 'viewer')
    try {
      expect(await sub.status).toBe(200)
      await sleep(INTERVAL * 2)
      expect(sub.events).toEqual([])
      const t0 = Date.now()
      await runs.transition(elsewhere, run.id, 'scheduled', 'running')
      const e = await sub.until((x) => runOf(x)?.status === 'RUNNING', 3000)
      const took = Date.now() - t0
      expect(runOf(e)).toMatchObject({ id: String(run.id), status: 'RUNNING', waitingSteps: 0 })
      expect(took).toBeLessThan(INTERVAL * 2 + 1000)
      await runs.setPhase(elsewhere, run.id, 'second act')
      await sub.until((x) => runOf(x)?.currentPhase === 'second act', 3000)
      const count = sub.events.length
      // A claim and its release move updated_at but change nothing a subscriber sees.
      const leased = await runs.claimTickBatch(
        elsewhere,
        'other-instance',
        'tok-elsewhere',
        new Date(Date.now() + 30_000),
        new Date(Date.now() + 3_600_000),
        500,
      )
      expect(leased.map((r) => r.id)).toContain(run.id)
      await runs.releaseClaim(elsewhere, run.id, 'other-instance', { wakeAt: null })
      await sleep(INTERVAL * 4)
      expect(sub.events.length).toBe(count)
    } finally {
      sub.stop()
    }
  })

  it('a change whose transaction commits after newer changes were seen still arrives', async () => {
    const late = await makeRun(elsewhere, { definition: fx })
    const early = await makeRun(elsewhere, { definition: fx })
    const client = wsClient(s, 'viewer')
    const sub = wsSubscribe<RunEvent>(client, RUN_CHANGES, { filter: { definitionId: String(showId) } })
    try {
      await sleep(INTERVAL * 2)
      await elsewhere.transaction(async (tx) => {
        // Stamped now, visible only at commit ...
        await runs.transition(tx, late.id, 'scheduled', 'running')
        await sleep(20)
        // ... while a newer change is committed and seen, moving the watermark past it.
        await runs.transition(elsewhere, early.id, 'scheduled', 'running')
        await sub.until((e) => runOf(e)?.id === String(early.id), 3000)
        await sleep(INTERVAL * 2)
      })
      await sub.until((e) => runOf(e)?.id === String(late.id) && runOf(e)?.status === 'RUNNING', 3000)
    } finally {
      sub.stop()
      await client.dispose()
    }
  })

  it('the inbox is re-sent when a cue parks or is answered elsewhere', async () => {
    const { run, steps: [first] = [] } = await makeRunWithSteps(elsewhere, 2, { definition: fx })
    const client = wsClient(s, 'viewer')
    const inbox = wsSubscribe<InboxEvent>(client, INBOX, { limit: 50 })
    try {
      await inbox.until((e) => Array.isArray(e.data?.waitingSteps))
      const before = inbox.events.length
      await elsewhere.query(
        `UPDATE event_run_steps SET status = 'running', parked = 1, started_at = NOW(3) WHERE id = ?`,
        [first?.id ?? 0],
      )
      const parked = await inbox.until(
        (e) => e.data?.waitingSteps.some((st) => st.id === String(first?.id)) === true,
        3000,
      )
      expect(parked.data?.waitingSteps.find((st) => st.id === String(first?.id))?.run.id).toBe(String(run.id))
      await steps.resolveParked(elsewhere, first?.id ?? 0, { note: 'done' })
      await inbox.until(
        (e) =>
          inbox.events.indexOf(e) > before &&
          e.data?.waitingSteps.every((st) => st.id !== String(first?.id)) === true,
        3000,
      )
      // Unchanged polls send nothing.
      const n = inbox.events.length
      await sleep(INTERVAL * 4)
      expect(inbox.events.length).toBe(n)
    } finally {
      inbox.stop()
      await client.dispose()
    }
  })

  it('2,000 subscribers of each kind: one statement per interval per kind, none once they leave', async () => {
    // The API's pool and the feeds' own connections (src/pools.ts), counted together.
    const db = {
      stats: {
        get statements() {
          return s.app.db.stats.statements + s.app.inboxDb.stats.statements + s.app.changesDb.stats.statements
        },
      },
    }
    // A parked cue, so the inbox has something in it.
    const { steps: parkedSteps } = await makeRunWithSteps(elsewhere, 1, { definition: fx })
    await elsewhere.query(
      `UPDATE event_run_steps SET status = 'running', parked = 1, started_at = NOW(3) WHERE id = ?`,
      [parkedSteps[0]?.id ?? 0],
    )
    const parkedAt = Date.now()
    const target = await makeRun(elsewhere, { definition: fx })
    // 50 sockets of 80 operations each: under the per-socket cap (WS_MAX_SUBSCRIPTIONS, 100).
    const clients = Array.from({ length: 50 }, () => wsClient(s, 'viewer'))
    const changeSubs: Collected<RunEvent>[] = []
    const inboxSubs: Collected<InboxEvent>[] = []
    try {
      for (let i = 0; i < 2000; i++) {
        const client = clients[i % clients.length] as (typeof clients)[number]
        // Four filters, one of which never matches.
        const filter = [
          { definitionId: String(showId) },
          { statuses: ['RUNNING'] },
          null,
          { definitionId: '987654321' },
        ][i % 4]
        changeSubs.push(wsSubscribe<RunEvent>(client, RUN_CHANGES, { filter }))
        inboxSubs.push(wsSubscribe<InboxEvent>(client, INBOX, { limit: [10, 100][i % 2] }))
      }
      await eventually(
        () => s.app.runChanges.listenerCount === 2000 && s.app.inbox.listenerCount === 2000,
        60_000,
      )
      await eventually(() => inboxSubs.every((sub) => sub.events.length >= 1), 60_000)
      // The parked cue's rows settle (SETTLED_MS) and the next poll keeps its
      // copies of them; until then each poll reads them again in full.
      await sleep(Math.max(0, SETTLED_MS - (Date.now() - parkedAt)) + INTERVAL * 2)

      // Quiet: nothing changes, so each poll is exactly one statement.
      // Less the inbox doorbell's renewals (one per 5 s, src/api/inboxBell.ts): not the feeds' polls.
      const bell = () => s.app.inboxBell.statements
      const s0 = db.stats.statements - bell()
      const c0 = s.app.runChanges.polls
      const i0 = s.app.inbox.polls
      const t0 = Date.now()
      await sleep(1500)
      const elapsed = Date.now() - t0
      const statements = db.stats.statements - bell() - s0
      const changePolls = s.app.runChanges.polls - c0
      const inboxPolls = s.app.inbox.polls - i0
      expect(changePolls).toBeGreaterThanOrEqual(3)
      expect(changePolls).toBeLessThanOrEqual(Math.ceil(elapsed / INTERVAL) + 1)
      expect(inboxPolls).toBeLessThanOrEqual(Math.ceil(elapsed / INTERVAL) + 1)
      expect(statements).toBe(changePolls + inboxPolls)
      console.log(
        `2,000 + 2,000 subscribers, ${elapsed} ms: ${statements} statements, ${changePolls} runChanges polls, ${inboxPolls} waitingSteps polls`,
      )

      // One change: delivered to the 1,500 subscribers whose filters match, for
      // the poll statements plus one read of the changed run (its row, then its
      // cue count) and one of its definition, which all 1,500 select.
      const s1 = db.stats.statements - bell()
      const c1 = s.app.runChanges.polls
      const i1 = s.app.inbox.polls
      await runs.transition(elsewhere, target.id, 'scheduled', 'running')
      await eventually(
        () =>
          changeSubs.filter((sub) => sub.events.some((e) => runOf(e)?.id === String(target.id))).length ===
          1500,
        10_000,
      )
      const polls = s.app.runChanges.polls - c1 + (s.app.inbox.polls - i1)
      expect(db.stats.statements - bell() - s1).toBeLessThanOrEqual(polls + 3)
      // The never-matching filter heard nothing.
      expect(changeSubs.filter((_, i) => i % 4 === 3).every((sub) => sub.events.length === 0)).toBe(true)
    } finally {
      for (const sub of [...changeSubs, ...inboxSubs]) sub.stop()
      await Promise.all(clients.map((c) => c.dispose()))
    }
    await eventually(() => s.app.runChanges.listenerCount === 0 && s.app.inbox.listenerCount === 0, 10_000)
    await sleep(INTERVAL) // a poll already in flight may finish
    const idle = db.stats.statements - s.app.inboxBell.statements
    await sleep(INTERVAL * 6)
    expect(db.stats.statements - s.app.inboxBell.statements - idle).toBe(0)
  }, 120_000)

  it('no token, no subscription: graphql-ws closes with 4401, SSE answers 401', async () => {
    let closed: { code: number } | undefined
    const client = wsClient(s, null, (e) => {
      closed ??= e
    })
    const sub = wsSubscribe<RunEvent>(client, RUN_CHANGES, {})
    await sub.done.then(
      () => expect.fail('the subscription should be refused'),
      () => {},
    )
    await client.dispose()
    expect(closed?.code).toBe(4401)
    expect(sub.events).toEqual([])
    for (const doc of [RUN_CHANGES, INBOX]) {
      const sse = sseSubscribe(s, doc, {}, null)
      expect(await sse.status).toBe(401)
      await sse.done
      expect(sse.events.every((e) => e.data == null)).toBe(true)
      expect(sse.events[0]?.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    }
  })
})
