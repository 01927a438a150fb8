/**
 * A run woken while its cue is parked on a person, with no timeout: resumed
 * after a pause (or woken by anything else that pulls `wake_at` to now). The
 * runner claims it, finds the cue still waiting for its person, and gives it
 * back to sleep until that person acts, as when the cue first parked. Before
 * the fix it gave the run back due again in a second, so such a run was
 * claimed, read and released every second until someone answered: an idle
 * cost per parked run that never ended on its own.
 */
import { afterAll, expect, it } from 'vitest'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { pauseRun, resumeRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { parkedCueRun, runOf, sleep, waitFor, waitForStatus } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

const claimOf = async (runId: number) =>
  (
    await t.db.query<{ claimedBy: string | null; wakeAt: Date | null }>(
      'SELECT claimed_by AS claimedBy, wake_at AS wakeAt FROM event_runs WHERE id = ?',
      [runId],
    )
  )[0]

/** The run, once nobody holds it and nothing but its person wakes it; null before. */
const asleep = async (runId: number) => {
  const c = await claimOf(runId)
  return c && c.claimedBy === null && c.wakeAt === null ? c : null
}

it('a run resumed while its cue waits on a person sleeps until the person answers, not once a second', async () => {
  // A short tick: a run given back due again would be claimed again within the test many times over.
  runner = new Runner({ db: t.db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 200 })
  const { runId, cue } = await parkedCueRun(t.db, runner)
  const live = runner
  const deps = { db: t.db, clock: systemClock, nudge: () => live.nudge() }
  // Parked and given back: nothing wakes it but its person.
  await waitFor(() => asleep(runId))

  expect((await pauseRun(deps, runId, 'operator')).applied).toBe(true)
  expect((await resumeRun(deps, runId, 'operator')).applied).toBe(true)
  // Resumed: due now, so the runner claims it, finds its cue still waiting, and gives it back asleep.
  await waitFor(() => asleep(runId), { timeoutMs: 5_000 })
  // And it stays asleep: sampled across several ticks and more than a second.
  for (let i = 0; i < 12; i++) {
    await sleep(150)
    expect(await claimOf(runId)).toEqual({ claimedBy: null, wakeAt: null })
  }
  expect((await runOf(t.db, runId)).status).toBe('running')

  // Its person still moves it on at once.
  const answered = await resolveCueAs(
    deps,
    cue.id,
    { name: 'operator', teams: [], admin: false },
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  await waitForStatus(t.db, runId, 'completed', 10_000)
})
