/**
 * A running runner materialises beside its passes: a definition that makes
 * thousands of runs ahead (`* * * * * *` over 60 scopes, 1,000 ahead each)
 * does not hold back a run due meanwhile. It starts within two ticks while
 * the materialisation is still writing, where it used to wait for all of it.
 * (20 scopes were once enough to be still writing 400 ms in; as the INSERT
 * got cheaper they no longer were, so the test could not show the overlap.)
 */
import { afterEach, expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { defineEvent, makeRegistry, program, runOf, sleep, waitFor } from './helpers/runnerHarness.ts'

const TICK_MS = 250
const SCOPES = 60
const AHEAD = SCOPES * 1000
const t = useTestDb()
let runner: Runner | null = null
afterEach(async () => {
  await runner?.stop()
  runner = null
})

it('a run due while 60,000 runs ahead are materialised starts within two ticks', async () => {
  const registry = makeRegistry()
  runner = new Runner({ db: t.db, registry, tickMs: TICK_MS, maxRunsAhead: 1000, instanceId: 'aside' })
  const LOG_ONLY = program(['main', [{ kind: 'core.log', params: { message: 'tick' } }]])
  // Made without a runner to nudge: nothing is materialised until the runner is asked.
  const dense = await defineEvent(
    { db: t.db, registry, clock: systemClock },
    { schedule: '* * * * * *', scopes: Array.from({ length: SCOPES }, (_, i) => `s${i}`), program: LOG_ONLY },
  )
  const other = await makeDefinition(t.db, { program: LOG_ONLY })
  runner.start()
  await sleep(2 * TICK_MS)
  const dueAt = new Date(Date.now() + 400)
  const due = await makeRun(t.db, { definition: other, scheduledFor: dueAt })
  runner.requestMaterialise()
  const started = await waitFor(
    async () => {
      const r = await runOf(t.db, due.id)
      return r.startedAt ? r : null
    },
    { timeoutMs: 30_000, intervalMs: 10 },
  )
  const ahead = async () =>
    Number(
      (
        await t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ?', [
          dense.id,
        ])
      )[0]?.n,
    )
  const aheadAtStart = await ahead()
  const lag = (started.startedAt as Date).getTime() - dueAt.getTime()
  await waitFor(async () => (await ahead()) >= AHEAD || null, { timeoutMs: 60_000, intervalMs: 200 })
  console.log(`started ${lag} ms after its time, with ${aheadAtStart} of ${AHEAD} runs ahead written`)
  // The materialisation was still writing when the run started: it did not wait for it.
  expect(aheadAtStart).toBeLessThan(AHEAD)
  expect(lag).toBeLessThanOrEqual(2 * TICK_MS)
}, 90_000)
