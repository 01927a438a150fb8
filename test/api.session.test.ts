/**
 * A session the way an admin UI runs it, through the real server with the
 * runner co-hosted (TICK_MS 50): create a definition, start a run, watch it
 * live, answer its cue, see it finish, and the subscription ends by itself.
 * Once over graphql-ws, once over SSE. Then a clean stop() with watchers open.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rawRun } from './helpers/fixtures.ts'
import {
  type Collected,
  eventually,
  handOversOnceGivenBack,
  SESSION_PROGRAM,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

interface StatusEvent {
  runStatus: {
    id: string
    status: string
    health: string
    currentPhase: string | null
    waitingSteps: number
    updatedAt: string
  }
}

const RUN_STATUS = `subscription ($id: ID!) {
  runStatus(id: $id) { id status health currentPhase waitingSteps updatedAt }
}`

let s: TestServer
beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

async function createAndStart(slug: string): Promise<string> {
  const created = await s.gql<{ createDefinition: { id: string; currentVersion: { version: number } } }>(
    `mutation ($input: CreateDefinitionInput!) {
       createDefinition(input: $input) { id currentVersion { version } }
     }`,
    { variables: { input: { slug, title: `Show ${slug}`, program: SESSION_PROGRAM } }, auth: 'admin' },
  )
  expect(created.body.errors).toBeUndefined()
  expect(created.body.data?.createDefinition.currentVersion.version).toBe(1)
  const started = await s.gql<{ startRun: { id: string; status: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d) { id status } }',
    { variables: { d: created.body.data?.createDefinition.id }, auth: 'operator' },
  )
  expect(started.body.errors).toBeUndefined()
  return started.body.data?.startRun.id as string
}

async function answerTheCue(runId: string): Promise<void> {
  const run = await s.gql<{
    run: { steps: { id: string; kind: string; status: string; parked: boolean }[] }
  }>('query ($id: ID!) { run(id: $id) { steps { id kind status parked } } }', {
    variables: { id: runId },
    auth: 'viewer',
  })
  const cue = run.body.data?.run.steps.find((st) => st.kind === 'core.cue')
  expect(cue).toMatchObject({ status: 'RUNNING', parked: true })
  const waiting = await s.gql<{ waitingSteps: { id: string; run: { id: string } }[] }>(
    '{ waitingSteps { id run { id } } }',
    { auth: 'viewer' },
  )
  expect(waiting.body.data?.waitingSteps).toContainEqual({ id: cue?.id, run: { id: runId } })
  // …and so does /metrics, for an alert on a cue nobody answers.
  const metrics = await (await fetch(`${s.url}/metrics`)).text()
  expect(metrics).toMatch(/^showrunner_waiting_steps [1-9]\d*$/m)
  expect(metrics).toMatch(/^showrunner_oldest_waiting_step_age_seconds \d+(\.\d+)?(e-\d+)?$/m)
  expect(metrics).toMatch(/^showrunner_degraded_runs 0$/m)
  // The run parked on its cue is running: live statuses are counted at every scrape.
  expect(metrics).toMatch(/^showrunner_runs_by_status\{status="running"\} [1-9]\d*$/m)
  // Once its runner has given the park back, the answer hands the run straight to it.
  const handOvers = await handOversOnceGivenBack(s, runId)
  const handedOver = handOvers()
  const resolved = await s.gql<{ resolveCue: { applied: boolean; step: { status: string } } }>(
    'mutation ($step: ID!) { resolveCue(stepId: $step, note: "go") { applied step { status } } }',
    { variables: { step: cue?.id }, auth: 'operator' },
  )
  expect(resolved.body.data?.resolveCue).toEqual({ applied: true, step: { status: 'COMPLETED' } })
  await eventually(() => handOvers() === handedOver + 1)
}

async function followTheShow(runId: string, sub: Collected<StatusEvent>): Promise<void> {
  const first = await sub.until(() => true)
  expect(first.data?.runStatus.id).toBe(runId)
  await sub.until((e) => e.data?.runStatus.status === 'RUNNING' && e.data.runStatus.waitingSteps === 1)
  await answerTheCue(runId)
  await sub.until((e) => e.data?.runStatus.status === 'COMPLETED', 15_000)
  await sub.done // completes by itself after the terminal status
  const statuses = sub.events.map((e) => e.data?.runStatus.status)
  expect(statuses.at(-1)).toBe('COMPLETED')
  expect(sub.events.every((e) => e.errors === undefined)).toBe(true)
  // Each event is a change: no two consecutive events are identical.
  for (let i = 1; i < sub.events.length; i++) expect(sub.events[i]).not.toEqual(sub.events[i - 1])
  for (const e of sub.events)
    expect(e.data?.runStatus.updatedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)

  const run = await s.gql<{
    run: {
      status: string
      endedAt: string
      waitingSteps: number
      logs: { message: string; actor: string | null }[]
    }
  }>('query ($id: ID!) { run(id: $id) { status endedAt waitingSteps logs { message actor } } }', {
    variables: { id: runId },
    auth: 'viewer',
  })
  expect(run.body.data?.run).toMatchObject({ status: 'COMPLETED', waitingSteps: 0 })
  const messages = run.body.data?.run.logs.map((l) => l.message) ?? []
  expect(messages).toEqual(
    expect.arrayContaining([
      expect.stringMatching(/^resolve cue \d+ \(step 2 of the run, core\.cue\) by operator#/),
    ]),
  )
  expect(messages).toContain('that was the show')
}

describe('an admin UI session', () => {
  it('over graphql-ws: start, watch, answer the cue, see COMPLETED, subscription ends by itself', async () => {
    const runId = await createAndStart('session-ws')
    const client = wsClient(s, 'viewer')
    try {
      const sub = wsSubscribe<StatusEvent>(client, RUN_STATUS, { id: runId })
      await followTheShow(runId, sub)
    } finally {
      await client.dispose()
    }
    await eventually(() => s.app.poller.listenerCount === 0)
  })

  it('over SSE: the same session on an event stream', async () => {
    const runId = await createAndStart('session-sse')
    const sub = sseSubscribe<StatusEvent>(s, RUN_STATUS, { id: runId }, 'viewer')
    expect(await sub.status).toBe(200)
    await followTheShow(runId, sub)
    await eventually(() => s.app.poller.listenerCount === 0)
  })

  it('a subscription to a finished run sends its state once and completes', async () => {
    const runs = await s.gql<{ runs: { id: string }[] }>('{ runs(status: COMPLETED, limit: 1) { id } }', {
      auth: 'viewer',
    })
    const id = runs.body.data?.runs[0]?.id
    const client = wsClient(s, 'viewer')
    try {
      const sub = wsSubscribe<StatusEvent>(client, RUN_STATUS, { id })
      await sub.done
      expect(sub.events.map((e) => e.data?.runStatus.status)).toEqual(['COMPLETED'])
    } finally {
      await client.dispose()
    }
  })
})

describe('health with the runner co-hosted', () => {
  it('lists this runner as live, counts runs by UPPERCASE status, and the tick metrics move', async () => {
    const r = await eventually(async () => {
      const h = await s.gql<{
        health: {
          ok: boolean
          database: boolean
          runners: { id: string; lastTickAt: string; tickLagMs: number }[]
          runsByStatus: Record<string, number>
          waitingSteps: number
        }
      }>('{ health { ok database runners { id lastTickAt tickLagMs } runsByStatus waitingSteps } }', {
        auth: 'viewer',
      })
      return h.body.data?.health.ok ? h.body.data.health : null
    })
    expect(r.database).toBe(true)
    expect(r.runners.map((x) => x.id)).toContain(s.config.instanceId)
    expect(r.runners[0]?.tickLagMs).toBeGreaterThanOrEqual(0)
    expect(Object.keys(r.runsByStatus).sort()).toEqual([
      'CANCELLED',
      'COMPLETED',
      'ENDING',
      'FAILED',
      'MISSED',
      'PAUSED',
      'RUNNING',
      'SCHEDULED',
      'STARTING',
    ])
    expect(r.runsByStatus.COMPLETED).toBeGreaterThanOrEqual(2)
    const metrics = await (await fetch(`${s.url}/metrics`)).text()
    expect(metrics).toMatch(/showrunner_tick_duration_seconds_count [1-9]/)
    // Terminal statuses come from a full count at most every 5 minutes (this
    // server was scraped before its runs completed); test/runCounts.test.ts
    // covers the refresh. Every status has its series.
    for (const status of ['scheduled', 'running', 'completed', 'missed'])
      expect(metrics).toMatch(new RegExp(`^showrunner_runs_by_status\\{status="${status}"\\} \\d+$`, 'm'))
    expect(metrics).toMatch(/showrunner_steps_total\{kind="core.cue",outcome="park"\} [1-9]/)
  })
})

describe('stop()', () => {
  it('stops the runner (claims released), closes WebSockets with 1001 under their subscriptions and ends SSE streams', async () => {
    const local = await startTestServer({ runner: true })
    let closeCode = 0
    try {
      const created = await local.gql<{ createDefinition: { id: string } }>(
        'mutation ($p: JSON!) { createDefinition(input: { slug: "stop-me", title: "Stop", program: $p }) { id } }',
        { variables: { p: SESSION_PROGRAM } },
      )
      const started = await local.gql<{ startRun: { id: string } }>(
        `mutation { startRun(definitionId: "${created.body.data?.createDefinition.id}") { id } }`,
      )
      const runId = started.body.data?.startRun.id as string
      // Whether the SSE stream had ended when the socket closed: the socket
      // goes first, before anything completes the subscriptions.
      let sseEnded = false
      let sseEndedAtWsClose: boolean | null = null
      const client = wsClient(local, 'viewer', (e) => {
        closeCode = e.code
        sseEndedAtWsClose = sseEnded
      })
      const ws = wsSubscribe<StatusEvent>(client, RUN_STATUS, { id: runId })
      const sse = sseSubscribe<StatusEvent>(local, RUN_STATUS, { id: runId }, 'viewer')
      void sse.done.finally(() => {
        sseEnded = true
      })
      await ws.until((e) => e.data?.runStatus.waitingSteps === 1)
      await sse.until((e) => e.data?.runStatus.waitingSteps === 1)
      await expect(local.app.metrics.openSubscriptions.get()).resolves.toMatchObject({
        values: [{ value: 2 }],
      })

      await local.app.stop()
      await sse.done // the stream ended, no hang
      // The socket went away under the subscription: not completed, which a
      // client would take for the run's end and not resubscribe.
      const wsEnd = await ws.done.then(
        () => 'completed',
        () => 'closed',
      )
      expect(wsEnd).toBe('closed')
      await eventually(() => closeCode !== 0, 5000)
      expect(closeCode).toBe(1001)
      expect(sseEndedAtWsClose).toBe(false)
      expect(local.app.runner?.state).toBe('stopped')
      expect(local.app.poller.listenerCount).toBe(0)
      const row = await rawRun(local.t.db, Number(runId))
      expect(row.claimed_by).toBeNull()
      await client.dispose()
    } finally {
      await local.close()
    }
  })
})
