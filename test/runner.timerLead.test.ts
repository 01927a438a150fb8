/**
 * Timers claimed ahead (src/runner/wakeLane.ts, timerGroups.ts): the wake
 * lane claims a run `timerLeadMs` before its timer ends and holds it until
 * the end comes, so the claim's round trips are not part of the wait's
 * overshoot. A step never moves before its time, a stopping runner gives a
 * held run back unadvanced, and with two instances every timer is advanced
 * once.
 */
import { afterEach, expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { resolveOptions, TIMER_LEAD_MS } from '../src/runner/options.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { logLines, stepsOf, TestClock, waitFor, waitForStatus } from './helpers/runnerHarness.ts'

const t = useTestDb()
const runners: Runner[] = []
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.stop()))
})

const newRunner = (timerLeadMs?: number, instanceId?: string) => {
  const runner = new Runner({
    db: t.db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 1000,
    leaseMs: 30_000,
    timerLeadMs,
    instanceId,
  })
  runners.push(runner)
  return runner
}

const waitShow = (seconds: number, tag: string) =>
  makeDefinition(t.db, {
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            { kind: 'core.log', params: { message: `before ${tag}` } },
            { kind: 'core.wait', params: { seconds } },
            { kind: 'core.log', params: { message: `after ${tag}` } },
          ],
        },
      ],
    },
  })

/** A stamp that must be there. */
const timeOf = (d: Date | null | undefined): number => {
  if (!d) throw new Error('expected a time, found none')
  return d.getTime()
}

const claimOf = async (runId: number) =>
  (
    await t.db.query<{ claimedBy: string | null }>(
      'SELECT claimed_by AS claimedBy FROM event_runs WHERE id = ?',
      [runId],
    )
  )[0]?.claimedBy ?? null

/** The run's wait step once it sleeps on its timer (its end known) and the run is given back to sleep. */
const sleepingWait = async (runId: number) => {
  const wait = await waitFor(
    async () => (await stepsOf(t.db, runId)).find((s) => s.kind === 'core.wait' && s.wakeAt !== null),
    { timeoutMs: 10_000, what: 'the wait to sleep on its timer' },
  )
  await waitFor(async () => (await claimOf(runId)) === null, {
    timeoutMs: 5_000,
    intervalMs: 5,
    what: 'the run given back to sleep',
  })
  return wait
}

/** A run of a wait of `seconds` on `runner`, started, once its wait sleeps and the run is given back. */
const sleepingRun = async (runner: Runner, seconds: number, tag: string) => {
  const show = await waitShow(seconds, tag)
  const runId = (await makeRun(t.db, { definition: show, scope: tag, scheduledFor: new Date() })).id
  runner.start()
  runner.nudge()
  return { runId, wait: await sleepingWait(runId) }
}

it('claims ahead only with a clock that moves with real time, by default', () => {
  const opts = { db: t.db, registry: createDefaultRegistry() }
  expect(resolveOptions(opts).timerLeadMs).toBe(TIMER_LEAD_MS)
  expect(resolveOptions({ ...opts, clock: systemClock }).timerLeadMs).toBe(TIMER_LEAD_MS)
  expect(resolveOptions({ ...opts, clock: new TestClock(new Date()) }).timerLeadMs).toBe(0)
  expect(resolveOptions({ ...opts, timerLeadMs: 200 }).timerLeadMs).toBe(200)
})

it("claims a timer's run ahead of its end, holds it, and moves the step no earlier than its time", async () => {
  // A long lead so that the claim ahead is seen from outside, well before the end.
  const runner = newRunner(700)
  const { runId, wait } = await sleepingRun(runner, 1.5, 'ahead')
  const end = timeOf(wait.wakeAt)
  // Held by the runner while its timer has a good while to run: claimed ahead.
  const seenAt = await waitFor(async () => ((await claimOf(runId)) !== null ? Date.now() : null), {
    timeoutMs: 5_000,
    intervalMs: 10,
    what: 'the run claimed ahead',
  })
  expect(end - seenAt).toBeGreaterThan(250)
  expect((await stepsOf(t.db, runId)).find((s) => s.id === wait.id)?.status).toBe('running')

  await waitForStatus(t.db, runId, 'completed')
  const after = await stepsOf(t.db, runId)
  const ended = after.find((s) => s.id === wait.id)
  expect(ended?.status).toBe('completed')
  expect(timeOf(ended?.endedAt)).toBeGreaterThanOrEqual(end)
  expect(timeOf(after[2]?.startedAt)).toBeGreaterThanOrEqual(end)
  expect(runner.lane.claimedAheadRuns).toBeGreaterThanOrEqual(1)
  expect((await logLines(t.db, runId)).filter((l) => l.includes('after ahead'))).toHaveLength(1)
}, 30_000)

it('a runner stopped while it holds a run for its timer gives it back unadvanced, and the next runner ends the wait', async () => {
  const first = newRunner(1_500)
  const { runId, wait } = await sleepingRun(first, 2, 'stop')
  await waitFor(() => first.lane.claimedAheadRuns === 1, {
    timeoutMs: 5_000,
    intervalMs: 5,
    what: 'the claim ahead',
  })
  expect(await claimOf(runId)).toBe(first.instanceId)
  expect(Date.now()).toBeLessThan(timeOf(wait.wakeAt))
  await first.stop()
  // Given back, its wait untouched: not ended, its timer as it was.
  expect(await claimOf(runId)).toBeNull()
  const held = (await stepsOf(t.db, runId)).find((s) => s.id === wait.id)
  expect(held?.endedAt).toBeNull()
  expect(held?.wakeAt?.getTime()).toBe(wait.wakeAt?.getTime())

  const second = newRunner()
  second.start()
  second.nudge()
  await waitForStatus(t.db, runId, 'completed', 10_000)
  const ended = (await stepsOf(t.db, runId)).find((s) => s.id === wait.id)
  expect(timeOf(ended?.endedAt)).toBeGreaterThanOrEqual(timeOf(wait.wakeAt))
  expect((await logLines(t.db, runId)).filter((l) => l.includes('after stop'))).toHaveLength(1)
}, 30_000)

it('two instances claiming timers ahead advance each one once, none before its end', async () => {
  const RUNS = 30
  const a = newRunner(undefined, 'lead-a')
  const b = newRunner(undefined, 'lead-b')
  // Waits of 0.3 to 1.2 s, ends spread so that groups form and interleave.
  const seconds = [0.3, 0.6, 0.9, 1.2]
  const shows = await Promise.all(seconds.map((sec, i) => waitShow(sec, `multi${i}`)))
  const runs: { id: number; seconds: number }[] = []
  for (let i = 0; i < RUNS; i++) {
    const k = i % shows.length
    const run = await makeRun(t.db, {
      definition: shows[k] as never,
      scope: `m${i}`,
      scheduledFor: new Date(),
    })
    runs.push({ id: run.id, seconds: seconds[k] as number })
  }
  a.start()
  b.start()
  a.nudge()
  b.nudge()
  for (const { id } of runs) await waitForStatus(t.db, id, 'completed', 20_000)
  for (const { id, seconds: sec } of runs) {
    const steps = await stepsOf(t.db, id)
    const wait = steps[1]
    // A wait of `seconds` ends that long after its step first started.
    const end = timeOf(wait?.startedAt) + sec * 1000
    expect(wait?.status).toBe('completed')
    expect(timeOf(wait?.endedAt)).toBeGreaterThanOrEqual(end)
    expect(timeOf(steps[2]?.startedAt)).toBeGreaterThanOrEqual(end)
    expect(steps[2]?.attempts).toBe(1)
    const lines = await logLines(t.db, id)
    expect(lines.filter((l) => l.startsWith('after '))).toHaveLength(1)
  }
  expect(a.lane.claimedAheadRuns + b.lane.claimedAheadRuns).toBeGreaterThan(0)
}, 60_000)
