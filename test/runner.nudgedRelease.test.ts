/**
 * A GO that lands while its cue is still being parked: the cue's ladder is
 * open (its CUE_WAITING went out, so a person may answer), the park and the
 * run's give-back not yet written. The answer pulls the run's `wake_at` to
 * now and the give-back keeps it (`woken_while_claimed`), but the answer's
 * nudge came while the run was still claimed, so neither the lane nor the
 * pass it woke could take it. Without a second wake the run waited for the
 * next tick (here a minute); a park given back after a nudge wakes the lane
 * (held.ts). The park's write is held back for real: its transaction waits
 * on the runner's own pool before it is sent to MariaDB.
 */
import { afterAll, expect, it } from 'vitest'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { DbCueLadder } from '../src/runner/cueLadder.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { makeRun } from './helpers/fixtures.ts'
import { cueShow, sleep, startedAtMs, stepsOf, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

/** How long the park's write is held back: the window the GO lands in. */
const PARK_HELD_MS = 600

it('a GO answered while its cue is being parked moves the show on when the park lands, not at the next tick', async () => {
  let holdPark = true
  let parkHeldAt = 0
  // Only the first park (with its give-back, one transaction) is held.
  const db = wrapStatements(t.db, 'runQuery', (real) => async (sql, params) => {
    if (holdPark && /SET parked = /.test(sql)) {
      holdPark = false
      parkHeldAt = Date.now()
      await sleep(PARK_HELD_MS)
    }
    return real(sql, params)
  })
  // A minute's tick: only a wake-up can move the run on within the test.
  // With its cue ladder, as the server runs it: the ladder opens before the park.
  runner = new Runner({
    db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 60_000,
    settings: { webhookAllow: [], cueLadder: new DbCueLadder(t.db) },
  })
  const runId = (await makeRun(t.db, { definition: await cueShow(t.db), scheduledFor: new Date() })).id
  runner.start()
  await waitFor(() => parkHeldAt > 0 || null, { timeoutMs: 10_000 })
  // The run is still claimed and its cue not parked yet, but its ladder is open: it can be answered.
  const [held] = await t.db.query<{ c: string | null }>(
    'SELECT claimed_by AS c FROM event_runs WHERE id = ?',
    [runId],
  )
  expect(held?.c).not.toBeNull()
  const cue = (await stepsOf(t.db, runId)).find((st) => st.kind === 'core.cue') as StepRow
  expect(cue).toMatchObject({ status: 'running', parked: false })

  const live = runner
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => live.nudge() },
    cue.id,
    { name: 'operator', teams: [], admin: false },
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  const parked = parkHeldAt + PARK_HELD_MS
  const next = await waitFor(
    async () => (await stepsOf(t.db, runId)).find((st) => st.kind === 'core.log' && st.startedAt),
    { timeoutMs: 10_000 },
  )
  // Moved on once the park landed, well within a second of it (the tick is a minute).
  expect(startedAtMs(next) - parked).toBeLessThan(1000)
})
