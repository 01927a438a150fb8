/**
 * A pause holds the show's time, through the real server with its runner: a
 * wait paused partway ends as long after the resume as it had left (not at
 * once, not its whole length later); a cue's deadline and its ladder's
 * reminder move later by the pause's length and fire there; RunStep.wakeAt and
 * Cue.deadlineAt read null while paused and the shifted instant after; a
 * pause survives a restart onto a second runner instance; bulk pause/resume
 * hold time the same way; a paused run's cue can be answered and the run goes
 * on at resume.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'
import { unique } from './helpers/fixtures.ts'
import {
  type Auth,
  authHeader,
  eventually,
  SHOWRUNNER_TOKENS,
  sleep,
  startTestServer,
  type TestServer,
} from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

/** Slack above an exact instant: one tick (50 ms) plus the runner's write under a shared CPU. */
const LATE_MS = 300
/** Slack for a runner in a process started a moment ago (its first passes, a loaded CI machine). */
const FIRST_PASS_LATE_MS = 1000

interface Step {
  id: string
  kind: string
  status: string
  parked: boolean
  wakeAt: string | null
  startedAt: string | null
  endedAt: string | null
  cue: {
    deadlineAt: string | null
    openedAt: string
    remindersSent: number
    answer: { outcome: string } | null
  } | null
}
interface Run {
  id: string
  status: string
  steps: Step[]
}

/** What the helpers below need of a server: its GraphQL client. */
type Gql = Pick<TestServer, 'gql'>

/** A GraphQL client of a server built here (the second instance of the restart test). */
function gqlAt(graphqlUrl: string): TestServer['gql'] {
  return (async (query: string, o: { variables?: Record<string, unknown>; auth?: Auth } = {}) => {
    const auth = authHeader(o.auth === undefined ? 'admin' : o.auth)
    const res = await fetch(graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(auth && { authorization: auth }) },
      body: JSON.stringify({ query, variables: o.variables }),
    })
    return { status: res.status, headers: res.headers, body: await res.json() }
  }) as TestServer['gql']
}

/** The environment the test server was configured from, for a second instance on its database. */
function configEnv(server: TestServer): Record<string, string> {
  return {
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: server.t.url,
    SHOWRUNNER_TOKENS,
    RUNNER: 'on',
    TICK_MS: '50',
    LEASE_MS: '5000',
    STATUS_POLL_MS: '50',
    LOG_LEVEL: 'silent',
  }
}

async function define(steps: unknown[], server: Gql = s): Promise<string> {
  const res = await server.gql<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    {
      variables: {
        input: { slug: unique('hold'), title: 'Pause holds', program: { phases: [{ name: 'show', steps }] } },
      },
      auth: 'admin',
    },
  )
  const id = res.body.data?.createDefinition.id
  if (!id) throw new Error(JSON.stringify(res.body.errors))
  return id
}

async function start(d: string, server: Gql = s): Promise<string> {
  const res = await server.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    { variables: { d }, auth: 'operator' },
  )
  return res.body.data?.startRun.id as string
}

async function read(id: string, server: Gql = s): Promise<Run> {
  const res = await server.gql<{ run: Run }>(
    `query ($id: ID!) { run(id: $id) { id status steps { id kind status parked wakeAt startedAt endedAt
       cue { deadlineAt openedAt remindersSent answer { outcome } } } } }`,
    { variables: { id } },
  )
  return res.body.data?.run as Run
}

/** A control mutation, with the client's clock before and after it (the server's clock is the same machine's). */
async function control(name: 'pauseRun' | 'resumeRun', id: string, server: Gql = s) {
  const before = Date.now()
  const res = await server.gql<Record<string, { applied: boolean }>>(
    `mutation ($id: ID!) { ${name}(id: $id) { applied } }`,
    { variables: { id }, auth: 'operator' },
  )
  const after = Date.now()
  expect(res.body.data?.[name]?.applied, JSON.stringify(res.body)).toBe(true)
  return { before, after }
}

const ms = (iso: string | null | undefined) => (iso ? Date.parse(iso) : Number.NaN)

it('a 4 s wait paused at ~1 s for 3 s ends ~3 s after the resume, and wakeAt says so', async () => {
  const d = await define([
    { kind: 'core.wait', params: { seconds: 4 } },
    { kind: 'core.log', params: { message: 'after' } },
  ])
  const id = await start(d)
  const sleeping = await eventually(async () => {
    const w = (await read(id)).steps[0] as Step
    return w.status === 'RUNNING' && w.wakeAt ? w : null
  })
  const wakeBefore = ms(sleeping.wakeAt)
  await sleep(Math.max(0, wakeBefore - 3000 - Date.now()))
  const paused = await control('pauseRun', id)
  const whilePaused = await read(id)
  expect(whilePaused.status).toBe('PAUSED')
  expect(whilePaused.steps[0]?.wakeAt).toBeNull()
  await sleep(3000)
  const resumed = await control('resumeRun', id)
  const after = (await read(id)).steps[0] as Step
  // Shifted by the pause's length, as the server measured it (between the two calls).
  const shift = ms(after.wakeAt) - wakeBefore
  expect(shift).toBeGreaterThanOrEqual(resumed.before - paused.after)
  expect(shift).toBeLessThanOrEqual(resumed.after - paused.before)
  expect(after.startedAt).toBe(sleeping.startedAt)
  const done = await eventually(async () => {
    const w = (await read(id)).steps[0] as Step
    return w.status === 'COMPLETED' ? w : null
  })
  // Not at once (today's behaviour), not the whole 4 s later: what was left.
  expect(ms(done.endedAt)).toBeGreaterThanOrEqual(ms(after.wakeAt))
  expect(ms(done.endedAt)).toBeLessThanOrEqual(ms(after.wakeAt) + LATE_MS)
  expect(ms(done.endedAt) - resumed.after).toBeGreaterThan(2500)
}, 20_000)

it("a cue's reminder and deadline move later by the pause's length and fire there", async () => {
  const d = await define([
    {
      kind: 'core.cue',
      params: { prompt: 'Go?', remindAfterSeconds: [2], timeoutSeconds: 5, onTimeout: 'continue' },
    },
    { kind: 'core.log', params: { message: 'after' } },
  ])
  const id = await start(d)
  const open = await eventually(async () => {
    const c = (await read(id)).steps[0] as Step
    return c.parked && c.cue ? c : null
  })
  const openedAt = ms(open.cue?.openedAt)
  const deadlineBefore = ms(open.cue?.deadlineAt)
  expect(deadlineBefore - openedAt).toBe(5000)
  await sleep(Math.max(0, openedAt + 1000 - Date.now()))
  const paused = await control('pauseRun', id)
  const whilePaused = (await read(id)).steps[0] as Step
  expect(whilePaused.cue?.deadlineAt).toBeNull()
  expect(whilePaused.wakeAt).toBeNull()
  await sleep(3000)
  const resumed = await control('resumeRun', id)
  const after = (await read(id)).steps[0] as Step
  const shift = ms(after.cue?.deadlineAt) - deadlineBefore
  expect(shift).toBeGreaterThanOrEqual(resumed.before - paused.after)
  expect(shift).toBeLessThanOrEqual(resumed.after - paused.before)
  // The rungs count from the opening, held too; the next wake is the shifted reminder.
  expect(ms(after.cue?.openedAt) - openedAt).toBe(shift)
  const reminderAt = ms(after.cue?.openedAt) + 2000
  expect(ms(after.wakeAt)).toBe(reminderAt)
  // The reminder fell due during the pause by the old clock: it must not go out at the resume.
  await sleep(Math.max(0, reminderAt - 300 - Date.now()))
  expect(((await read(id)).steps[0] as Step).cue?.remindersSent).toBe(0)
  await eventually(async () => ((await read(id)).steps[0] as Step).cue?.remindersSent === 1, 5000)
  expect(Date.now()).toBeLessThanOrEqual(reminderAt + LATE_MS + 100)
  const timedOut = await eventually(async () => {
    const c = (await read(id)).steps[0] as Step
    return c.status === 'COMPLETED' ? c : null
  }, 8000)
  expect(timedOut.cue?.answer?.outcome).toBe('timedOut')
  expect(ms(timedOut.endedAt)).toBeGreaterThanOrEqual(ms(after.cue?.deadlineAt))
  expect(ms(timedOut.endedAt)).toBeLessThanOrEqual(ms(after.cue?.deadlineAt) + LATE_MS)
}, 25_000)

it("a paused run's cue can be answered; the run goes on only at the resume", async () => {
  const d = await define([
    { kind: 'core.cue', params: { prompt: 'Ready?', timeoutSeconds: 60 } },
    { kind: 'core.wait', params: { seconds: 1 } },
  ])
  const id = await start(d)
  const cue = await eventually(async () => {
    const c = (await read(id)).steps[0] as Step
    return c.parked && c.cue ? c : null
  })
  await control('pauseRun', id)
  expect(((await read(id)).steps[0] as Step).cue?.deadlineAt).toBeNull()
  const answer = await s.gql<{ resolveCue: { applied: boolean } }>(
    'mutation ($id: ID!) { resolveCue(stepId: $id, note: "while paused") { applied } }',
    { variables: { id: cue.id }, auth: 'operator' },
  )
  expect(answer.body.data?.resolveCue.applied).toBe(true)
  await sleep(500)
  const held = await read(id)
  expect(held.status).toBe('PAUSED')
  expect(held.steps[0]?.status).toBe('COMPLETED')
  expect(held.steps[0]?.cue?.answer?.outcome).toBe('resolved')
  expect(held.steps[1]?.status).toBe('PENDING')
  await control('resumeRun', id)
  const done = await eventually(async () => {
    const r = await read(id)
    return r.status === 'COMPLETED' ? r : null
  })
  expect(done.steps[1]?.status).toBe('COMPLETED')
}, 20_000)

it('bulk pause and resume hold the time of every run they move, like pauseRun and resumeRun', async () => {
  const d = await define([{ kind: 'core.wait', params: { seconds: 4 } }])
  const ids = [await start(d), await start(d)]
  const before = await eventually(async () => {
    const runs = await Promise.all(ids.map((i) => read(i)))
    return runs.every((r) => r.steps[0]?.wakeAt) ? runs.map((r) => ms(r.steps[0]?.wakeAt)) : null
  })
  const bulk = async (action: 'PAUSE' | 'RESUME') => {
    const t0 = Date.now()
    const res = await s.gql<{ bulkRuns: { applied: number } }>(
      `mutation ($action: BulkAction!, $filter: RunFilter!) {
         bulkRuns(action: $action, filter: $filter, dryRun: false) { applied } }`,
      { variables: { action, filter: { definitionId: d } }, auth: 'operator' },
    )
    expect(res.body.data?.bulkRuns.applied, JSON.stringify(res.body)).toBe(2)
    return { before: t0, after: Date.now() }
  }
  await sleep(1000)
  const paused = await bulk('PAUSE')
  for (const i of ids) expect((await read(i)).steps[0]?.wakeAt).toBeNull()
  await sleep(2000)
  const resumed = await bulk('RESUME')
  for (const [k, i] of ids.entries()) {
    const shift = ms((await read(i)).steps[0]?.wakeAt) - (before[k] as number)
    expect(shift).toBeGreaterThanOrEqual(resumed.before - paused.after)
    expect(shift).toBeLessThanOrEqual(resumed.after - paused.before)
  }
  for (const i of ids) {
    const w = await eventually(async () => {
      const step = (await read(i)).steps[0] as Step
      return step.status === 'COMPLETED' ? step : null
    })
    expect(ms(w.endedAt) - resumed.after).toBeGreaterThan(500)
  }
}, 20_000)

it('a rehearsal at speed keeps its scaling: the time left is what was left at its speed', async () => {
  // 40 s of show time at speed 10 is 4 s; paused at ~1 s for 2 s, it ends ~3 s after the resume.
  const d = await define([{ kind: 'core.wait', params: { seconds: 40 } }])
  const res = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d, rehearsal: true, speed: 10) { id } }',
    { variables: { d }, auth: 'operator' },
  )
  const id = res.body.data?.startRun.id as string
  const sleeping = await eventually(async () => {
    const w = (await read(id)).steps[0] as Step
    return w.status === 'RUNNING' && w.wakeAt ? w : null
  })
  expect(ms(sleeping.wakeAt) - ms(sleeping.startedAt)).toBe(4000)
  await sleep(Math.max(0, ms(sleeping.wakeAt) - 3000 - Date.now()))
  const paused = await control('pauseRun', id)
  await sleep(2000)
  const resumed = await control('resumeRun', id)
  const after = (await read(id)).steps[0] as Step
  const shift = ms(after.wakeAt) - ms(sleeping.wakeAt)
  expect(shift).toBeGreaterThanOrEqual(resumed.before - paused.after)
  expect(shift).toBeLessThanOrEqual(resumed.after - paused.before)
  const done = await eventually(async () => {
    const w = (await read(id)).steps[0] as Step
    return w.status === 'COMPLETED' ? w : null
  })
  expect(ms(done.endedAt)).toBeGreaterThanOrEqual(ms(after.wakeAt))
  expect(ms(done.endedAt)).toBeLessThanOrEqual(ms(after.wakeAt) + LATE_MS)
}, 20_000)

it('a pause held across a restart: a second runner instance resumes with the time that was left', async () => {
  // Instance A runs the wait and is paused; it stops; B starts on the same database and resumes.
  const a = await startTestServer({ runner: true })
  let b: App | undefined
  try {
    const d = await define([{ kind: 'core.wait', params: { seconds: 3 } }], a)
    const id = await start(d, a)
    const sleeping = await eventually(async () => {
      const w = (await read(id, a)).steps[0] as Step
      return w.status === 'RUNNING' && w.wakeAt ? w : null
    })
    await sleep(Math.max(0, ms(sleeping.wakeAt) - 2000 - Date.now()))
    const paused = await control('pauseRun', id, a)
    await a.app.stop()
    await sleep(2000)
    b = buildApp(loadConfig({ ...configEnv(a), INSTANCE_ID: `${a.config.instanceId}-b` }), {
      logger: silentLogger(),
    })
    const { url } = await b.start()
    const onB = { gql: gqlAt(`${url}/graphql`) }
    const resumed = await control('resumeRun', id, onB)
    const after = (await read(id, onB)).steps[0] as Step
    const shift = ms(after.wakeAt) - ms(sleeping.wakeAt)
    expect(shift).toBeGreaterThanOrEqual(resumed.before - paused.after)
    expect(shift).toBeLessThanOrEqual(resumed.after - paused.before)
    const done = await eventually(async () => {
      const w = (await read(id, onB)).steps[0] as Step
      return w.status === 'COMPLETED' ? w : null
    })
    expect(ms(done.endedAt)).toBeGreaterThanOrEqual(ms(after.wakeAt))
    // B is a process a few seconds old on a shared machine (CI saw 476 ms
    // late once); a wait that ignored the time left would end 2 s late, far past this.
    expect(ms(done.endedAt)).toBeLessThanOrEqual(ms(after.wakeAt) + FIRST_PASS_LATE_MS)
  } finally {
    await b?.stop()
    await a.t.drop()
  }
}, 30_000)
