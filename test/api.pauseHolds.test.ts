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
import { buildApp } from '../src/server.ts'
import { unique } from './helpers/fixtures.ts'
import { eventually, SHOWRUNNER_TOKENS, sleep, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

/** Slack above an exact instant: one tick (50 ms) plus the runner's write under a shared CPU. */
const LATE_MS = 300

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

async function define(steps: unknown[]): Promise<string> {
  const res = await s.gql<{ createDefinition: { id: string } }>(
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

async function start(d: string, gql = s.gql.bind(s)): Promise<string> {
  const res = await gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    { variables: { d }, auth: 'operator' },
  )
  return res.body.data?.startRun.id as string
}

async function read(id: string, server = s): Promise<Run> {
  const res = await server.gql<{ run: Run }>(
    `query ($id: ID!) { run(id: $id) { id status steps { id kind status parked wakeAt startedAt endedAt
       cue { deadlineAt openedAt remindersSent answer { outcome } } } } }`,
    { variables: { id } },
  )
  return res.body.data?.run as Run
}

/** A control mutation, with the client's clock before and after it (the server's clock is the same machine's). */
async function control(name: 'pauseRun' | 'resumeRun', id: string, server = s) {
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
