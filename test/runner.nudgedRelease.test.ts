/**
 * A GO that lands while its cue's park is still being given back. The answer
 * pulls the run's `wake_at` to now and the release keeps it
 * (`woken_while_claimed`), but the answer's nudge came while the run was
 * still claimed, so neither the lane nor the pass it woke could take it.
 * Before the fix nothing woke the runner again: the run waited for the next
 * tick (here a minute). Now a release of a parked run after a nudge wakes the
 * lane. The release is held back for real: its statement waits on the
 * runner's own pool before it is sent to MariaDB.
 */
import { afterAll, expect, it } from 'vitest'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { parkedCueRun, sleep, startedAtMs, stepsOf, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

/** How long the park's release is held back: the window the GO lands in. */
const RELEASE_HELD_MS = 600

it('a GO answered while its park is being given back moves the show on when the release lands, not at the next tick', async () => {
  let holdRelease = true
  let releaseHeldAt = 0
  // Only the first give-back of a claim (the parked run's) is held.
  const db = wrapStatements(t.db, 'runQuery', (real) => async (sql, params) => {
    if (holdRelease && /woken_while_claimed = 0/.test(sql)) {
      holdRelease = false
      releaseHeldAt = Date.now()
      await sleep(RELEASE_HELD_MS)
    }
    return real(sql, params)
  })
  // A minute's tick: only a wake-up can move the run on within the test.
  runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  const { runId, cue } = await parkedCueRun(t.db, runner)
  await waitFor(() => releaseHeldAt > 0 || null, { timeoutMs: 10_000 })
  // The run is still claimed: its release is on its way.
  const [held] = await t.db.query<{ c: string | null }>(
    'SELECT claimed_by AS c FROM event_runs WHERE id = ?',
    [runId],
  )
  expect(held?.c).not.toBeNull()

  const live = runner
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => live.nudge() },
    cue.id,
    { name: 'operator', teams: [], admin: false },
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  const released = releaseHeldAt + RELEASE_HELD_MS
  const next = await waitFor(
    async () => (await stepsOf(t.db, runId)).find((st) => st.kind === 'core.log' && st.startedAt),
    { timeoutMs: 10_000 },
  )
  console.log('DBG', startedAtMs(next) - released, live.lane.claimedRuns, Date.now() - released)
  // Moved on once the release landed, well within a second of it (the tick is a minute).
  expect(startedAtMs(next) - released).toBeLessThan(1000)
})
