/**
 * A slow batch does not hold back what comes due meanwhile (src/runner/flights.ts).
 * The real server with its runner at the default TICK_MS (1 s): 64 runs come
 * due at one instant, each calling a webhook that answers in 500 ms, eight at
 * a time, so their batch advances for about four seconds. While it does:
 *
 * - a cue answered over HTTP (`resolveCue`) moves its run on within a bound
 *   that does not depend on the batch (the run's next step starts long before
 *   the batch's last webhook returns), where it used to wait for the pass;
 * - a 2 s `core.wait` whose end falls mid-batch ends on time;
 *
 * and nothing is advanced twice: one webhook call per run, every run completed.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { sleep, startedAtMs, stepsOf, useReceiver, waitFor } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const SLOW_RUNS = 64
const SLOW_MS = 500
/** Loose against a loaded shared machine, and far below the ~4 s the batch lasts. */
const BOUND_MS = 800

const receiver = useReceiver()
let s: TestServer

beforeAll(async () => {
  receiver.route('/slow', () => ({ status: 200, delayMs: SLOW_MS }))
  s = await startTestServer({
    runner: true,
    // Eight webhooks at a time, so the batch lasts about four seconds.
    env: { TICK_MS: '1000', LEASE_MS: '30000', RUNNER_PARALLELISM: '8', WEBHOOK_ALLOW: `${receiver.url}/` },
  })
})
// Registered after useReceiver's: hooks unwind as a stack, so the server closes before the receiver.
afterAll(async () => {
  await s?.close()
})

async function define(slug: string, steps: unknown[]): Promise<string> {
  const r = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!, $slug: String!) { createDefinition(input: { slug: $slug, title: $slug, program: $p }) { id } }',
    { variables: { slug, p: { phases: [{ name: 'main', steps }] } } },
  )
  const id = r.body.data?.createDefinition.id
  if (!id) throw new Error(`createDefinition ${slug}: ${JSON.stringify(r.body.errors)}`)
  return id
}

async function startRun(definitionId: string, scope: string, at?: Date): Promise<number> {
  const r = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $scope: String!, $at: DateTime) { startRun(definitionId: $d, scope: $scope, at: $at) { id } }',
    { variables: { d: definitionId, scope, at: at?.toISOString() ?? null }, auth: 'operator' },
  )
  const id = r.body.data?.startRun.id
  if (!id) throw new Error(`startRun: ${JSON.stringify(r.body.errors)}`)
  return Number(id)
}

it('while a batch of slow webhooks advances, an answered cue moves on and a 2 s wait ends on time', async () => {
  // The batch's runs go straight into the database (no nudge, no API), so all
  // of them are due at one instant however loaded the machine is.
  const slow = await makeDefinition(s.t.db, {
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            { kind: 'core.webhook', params: { url: `${receiver.url}/slow/{{run.scope}}`, body: {} } },
            { kind: 'core.log', params: { message: 'slow done' } },
          ],
        },
      ],
    },
  })
  const show = await define('cue-show', [
    { kind: 'core.cue', params: { prompt: 'GO?' } },
    { kind: 'core.log', params: { message: 'after GO' } },
  ])
  const timer = await define('timer-show', [
    { kind: 'core.log', params: { message: 'before the wait' } },
    { kind: 'core.wait', params: { seconds: 2 } },
    { kind: 'core.log', params: { message: 'after the wait' } },
  ])

  // The cue run parks first, on its own.
  const cueRun = await startRun(show, 'stage')
  const cue = await waitFor(
    async () => (await stepsOf(s.t.db, cueRun)).find((st) => st.kind === 'core.cue' && st.parked),
    { timeoutMs: 10_000 },
  )
  // The batch: every run due at one instant, a little ahead; the timer half a
  // second before it, so its 2 s end falls about 1.5 s into the batch.
  const instant = new Date(Date.now() + 3000)
  const timerRun = await startRun(timer, 'clock', new Date(instant.getTime() - 500))
  const slowRuns: number[] = []
  for (let i = 0; i < SLOW_RUNS; i++)
    slowRuns.push((await makeRun(s.t.db, { definition: slow, scope: `s${i}`, scheduledFor: instant })).id)
  expect(Date.now()).toBeLessThan(instant.getTime() - 500)
  await sleep(Math.max(0, instant.getTime() - Date.now()))

  // Mid-batch: the webhooks are in flight, most of them not yet called.
  await waitFor(() => receiver.calls.length >= 8 || null, { timeoutMs: 10_000 })
  await sleep(600)
  const callsAtGo = receiver.calls.length
  const go = Date.now()
  const answered = await s.gql(`mutation { resolveCue(stepId: "${cue.id}", note: "go") { applied } }`, {
    auth: 'operator',
  })
  expect(answered.body.data).toEqual({ resolveCue: { applied: true } })
  const next = await waitFor(
    async () => (await stepsOf(s.t.db, cueRun)).find((st) => st.kind === 'core.log' && st.startedAt),
    { timeoutMs: 15_000 },
  )

  // Everything completes, each slow webhook called once.
  await waitFor(
    async () => {
      const rows = await s.t.db.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'completed' AND id IN (${[...slowRuns, cueRun, timerRun].join(',')})`,
      )
      return Number(rows[0]?.n) === SLOW_RUNS + 2 || null
    },
    { timeoutMs: 30_000 },
  )
  expect(receiver.calls).toHaveLength(SLOW_RUNS)
  expect(new Set(receiver.calls.map((c) => c.key)).size).toBe(SLOW_RUNS)

  const slowSteps = await Promise.all(slowRuns.map((id) => stepsOf(s.t.db, id)))
  const batchEnded = Math.max(...slowSteps.map((st) => st[0]?.endedAt?.getTime() ?? 0))
  const goToNext = startedAtMs(next) - go
  const [, wait, after] = await stepsOf(s.t.db, timerRun)
  const overshoot = startedAtMs(after) - (startedAtMs(wait) + 2000)
  console.log(
    `GO → next step ${goToNext} ms (${callsAtGo} webhooks called at GO); 2 s wait overshoot ${overshoot} ms; the batch went on ${batchEnded - startedAtMs(next)} ms after GO's next step`,
  )
  // The batch was still advancing long after both: the bounds are not the pass's.
  expect(batchEnded - startedAtMs(next)).toBeGreaterThan(1000)
  expect(startedAtMs(wait)).toBeLessThan(Math.min(...slowSteps.map((st) => startedAtMs(st[0]))))
  expect(batchEnded - startedAtMs(after)).toBeGreaterThan(1000)
  expect(goToNext).toBeLessThan(BOUND_MS)
  expect(overshoot).toBeGreaterThanOrEqual(0)
  expect(overshoot).toBeLessThan(BOUND_MS)
}, 90_000)
