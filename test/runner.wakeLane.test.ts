/**
 * The wake lane (src/runner/wakeLane.ts): an answered cue and a timer that
 * runs out are claimed and advanced beside the passes, not by the next pass.
 * A runner with one batch in flight (`batchesInFlight: 1`) whose batch is
 * stuck in webhooks that answer in 4 s cannot start a pass until that batch
 * ends: its loop waits for the slot. Before the lane, a GO and a 2 s wait's
 * end both waited for it (seconds); now each advances within a bound far
 * below the batch's remainder, and the lane, not a pass, claimed them.
 * Nothing is advanced twice: one webhook call per run, every run completed.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { resolveOptions } from '../src/runner/options.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { sleep, startedAtMs, stepsOf, useReceiver, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
const SLOW_RUNS = 8
const SLOW_MS = 4000
/** Loose against a loaded shared machine, and far below the ~3 s of the stuck batch still ahead. */
const BOUND_MS = 1500

const receiver = useReceiver()
let runner: Runner

beforeAll(() => {
  receiver.route('/slow', () => ({ status: 200, delayMs: SLOW_MS }))
})
// Registered after useReceiver's: hooks unwind as a stack, so the runner stops before the receiver closes.
afterAll(async () => {
  await runner?.stop()
})

const oneStep = (steps: unknown[]) => ({ program: { phases: [{ name: 'main', steps }] } })

it('while the only batch in flight is stuck in slow webhooks, a GO and a 2 s wait still advance, claimed by the lane', async () => {
  runner = new Runner({
    db: t.db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 1000,
    leaseMs: 30_000,
    batchesInFlight: 1,
    settings: { webhookAllow: [`${receiver.url}/`] },
  })
  const slow = await makeDefinition(
    t.db,
    oneStep([{ kind: 'core.webhook', params: { url: `${receiver.url}/slow/{{run.scope}}`, body: {} } }]),
  )
  const show = await makeDefinition(
    t.db,
    oneStep([
      { kind: 'core.cue', params: { prompt: 'GO?' } },
      { kind: 'core.log', params: { message: 'after GO' } },
    ]),
  )
  const timer = await makeDefinition(
    t.db,
    oneStep([
      { kind: 'core.log', params: { message: 'before the wait' } },
      { kind: 'core.wait', params: { seconds: 2 } },
      { kind: 'core.log', params: { message: 'after the wait' } },
    ]),
  )
  runner.start()
  // The cue parks and the wait begins before the slow batch takes the one slot.
  const cueRun = (await makeRun(t.db, { definition: show, scope: 'stage', scheduledFor: new Date() })).id
  const timerRun = (await makeRun(t.db, { definition: timer, scope: 'clock', scheduledFor: new Date() })).id
  runner.nudge()
  const cue = await waitFor(
    async () => (await stepsOf(t.db, cueRun)).find((st) => st.kind === 'core.cue' && st.parked),
    { timeoutMs: 10_000 },
  )
  const wait = await waitFor(
    async () => (await stepsOf(t.db, timerRun)).find((st) => st.kind === 'core.wait' && st.startedAt),
    { timeoutMs: 10_000 },
  )
  // The slow runs are due at one instant a little ahead, so one pass starts
  // them all as one batch; the wait's end falls about a second into it.
  const instant = new Date(Date.now() + 800)
  const slowRuns: number[] = []
  for (let i = 0; i < SLOW_RUNS; i++)
    slowRuns.push((await makeRun(t.db, { definition: slow, scope: `s${i}`, scheduledFor: instant })).id)
  expect(Date.now()).toBeLessThan(instant.getTime())
  runner.nudge()
  await waitFor(() => receiver.calls.length >= SLOW_RUNS || null, { timeoutMs: 10_000 })
  const claimedBefore = runner.lane.claimedRuns

  // The batch is stuck for about 4 s from here; the loop waits for its slot.
  await sleep(300)
  const go = Date.now()
  const person = { name: 'operator', teams: [], admin: false }
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => runner.nudge() },
    cue.id,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  const next = await waitFor(
    async () => (await stepsOf(t.db, cueRun)).find((st) => st.kind === 'core.log' && st.startedAt),
    { timeoutMs: 15_000 },
  )
  const after = await waitFor(
    async () => (await stepsOf(t.db, timerRun)).find((st) => st.seq === 2 && st.startedAt),
    { timeoutMs: 15_000 },
  )

  await waitFor(
    async () => {
      const rows = await t.db.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'completed' AND id IN (${[...slowRuns, cueRun, timerRun].join(',')})`,
      )
      return Number(rows[0]?.n) === SLOW_RUNS + 2 || null
    },
    { timeoutMs: 30_000 },
  )
  expect(receiver.calls).toHaveLength(SLOW_RUNS)
  expect(new Set(receiver.calls.map((c) => c.key)).size).toBe(SLOW_RUNS)

  const slowSteps = await Promise.all(slowRuns.map((id) => stepsOf(t.db, id)))
  const batchEnded = Math.min(...slowSteps.map((st) => st[0]?.endedAt?.getTime() ?? 0))
  const goToNext = startedAtMs(next) - go
  const overshoot = startedAtMs(after) - (startedAtMs(wait) + 2000)
  console.log(
    `GO → next step ${goToNext} ms; 2 s wait overshoot ${overshoot} ms; the stuck batch ended ${batchEnded - startedAtMs(next)} ms after GO's next step`,
  )
  // Both advanced while the only batch in flight was still stuck: no pass could have claimed them.
  expect(batchEnded - startedAtMs(next)).toBeGreaterThan(1000)
  expect(batchEnded - startedAtMs(after)).toBeGreaterThan(500)
  // The lane claimed them (the answered run and the timer's), not a pass.
  expect(runner.lane.claimedRuns - claimedBefore).toBeGreaterThanOrEqual(2)
  expect(goToNext).toBeLessThan(BOUND_MS)
  expect(overshoot).toBeGreaterThanOrEqual(0)
  expect(overshoot).toBeLessThan(BOUND_MS)
}, 90_000)

it("the lane has batch slots of its own, four times the passes' by default", () => {
  const base = { db: t.db, registry: createDefaultRegistry() }
  expect(resolveOptions(base)).toMatchObject({ batchesInFlight: 4, wakeBatchesInFlight: 16 })
  expect(resolveOptions({ ...base, batchesInFlight: 1 }).wakeBatchesInFlight).toBe(4)
  expect(resolveOptions({ ...base, wakeBatchesInFlight: 2 }).wakeBatchesInFlight).toBe(2)
  // 0 (RUNNER_WAKE_BATCHES=0): no lane, woken runs wait for the passes as before.
  expect(resolveOptions({ ...base, wakeBatchesInFlight: 0 }).wakeBatchesInFlight).toBe(0)
})
