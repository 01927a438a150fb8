/**
 * Rehearsal at speed through the real server with its runner: a 10-minute
 * program (waits by seconds and by an `until` offset) rehearsed at speed 60
 * finishes in about 10 s, each wait ending in order at its scaled time; the
 * run shows its speed; speed is refused outside 1..3600 and for a run that is
 * not a rehearsal.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { waitFor } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const log = (message: string) => ({ kind: 'core.log', params: { message } })
const TEN_MINUTES = {
  phases: [
    {
      name: 'show',
      steps: [
        log('doors'),
        { kind: 'core.wait', params: { seconds: 120 } },
        log('two minutes in'),
        { kind: 'core.wait', params: { until: '+5m' } },
        log('five minutes in'),
        { kind: 'core.wait', params: { seconds: 300 } },
        log('ten minutes in'),
      ],
    },
  ],
}

async function define(): Promise<string> {
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    {
      variables: { input: { slug: unique('speed'), title: 'Ten minutes', program: TEN_MINUTES } },
      auth: 'admin',
    },
  )
  return res.body.data?.createDefinition.id as string
}

function start(d: string, rehearsal: boolean, speed?: number) {
  return s.gql<{ startRun: { id: string; speed: number; rehearsal: boolean; scheduledFor: string } }>(
    `mutation ($d: ID!, $rehearsal: Boolean, $speed: Float) {
       startRun(definitionId: $d, rehearsal: $rehearsal, speed: $speed) { id speed rehearsal scheduledFor } }`,
    { variables: { d, rehearsal, speed }, auth: 'operator' },
  )
}

it('refuses a speed outside 1..3600, and any speed but 1 for a run that is not a rehearsal', async () => {
  const d = await define()
  for (const [rehearsal, speed] of [
    [false, 2],
    [true, 0.5],
    [true, 3601],
    [true, 0],
  ] as const) {
    const res = await start(d, rehearsal, speed)
    expect(res.body.errors?.[0]?.extensions?.code, `${rehearsal} ${speed}`).toBe('BAD_USER_INPUT')
  }
  const plain = await start(d, false, 1)
  expect(plain.body.data?.startRun.speed).toBe(1)
  await s.gql('mutation ($id: ID!) { cancelRun(id: $id) { applied } }', {
    variables: { id: plain.body.data?.startRun.id },
    auth: 'operator',
  })
})

it('a 10-minute program rehearsed at speed 60 finishes in about 10 s, its waits in order at their scaled times', async () => {
  const d = await define()
  const res = await start(d, true, 60)
  expect(res.body.errors).toBeUndefined()
  const run = res.body.data?.startRun
  expect(run).toMatchObject({ speed: 60, rehearsal: true })
  const t0 = new Date(run?.scheduledFor as string).getTime()
  const done = await waitFor(
    async () => {
      const r = await s.gql<{
        run: { status: string; endedAt: string | null; logs: { at: string; message: string }[] }
      }>(`query ($id: ID!) { run(id: $id) { status endedAt logs(limit: 100) { at message } } }`, {
        variables: { id: run?.id },
        auth: 'viewer',
      })
      return r.body.data?.run.status === 'COMPLETED' ? r.body.data.run : null
    },
    { timeoutMs: 30_000, intervalMs: 100, what: 'the rehearsal to complete' },
  )
  const elapsed = new Date(done.endedAt as string).getTime() - t0
  expect(elapsed).toBeGreaterThanOrEqual(10_000)
  expect(elapsed).toBeLessThan(12_000)
  const at = (message: string) => {
    const line = done.logs.find((l) => l.message.includes(message))
    expect(line, message).toBeDefined()
    return new Date(line?.at as string).getTime() - t0
  }
  const marks = [at('two minutes in'), at('five minutes in'), at('ten minutes in')]
  // Each at its scaled time (2 s, 5 s, 10 s), never early, late by little more than a tick.
  ;[2000, 5000, 10_000].forEach((expected, i) => {
    expect(marks[i]).toBeGreaterThanOrEqual(expected)
    expect(marks[i]).toBeLessThan(expected + 1500)
  })
  expect([...marks].sort((a, b) => a - b)).toEqual(marks)
})
