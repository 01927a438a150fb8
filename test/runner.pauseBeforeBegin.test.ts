/**
 * A pause that lands after the runner read a run's status and before it
 * begins the run's next step: the step does not start. The runner reads a
 * batch's statuses once per round, and a timer's run is claimed (and its
 * status read) ahead of the timer's end (wakeLane.ts); the begin itself is
 * guarded on the run still advancing, so neither gap lets a paused run take
 * a step. The pause is made for real, through the API's operation, at the
 * moment the begin is about to be sent on the runner's own pool.
 */
import { afterEach, expect, it } from 'vitest'
import { pauseRun, resumeRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { isBegin, program, stepsOf, waitFor, waitForStatus } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterEach(async () => {
  await runner?.stop()
  runner = undefined
})

it('a pause landing between the status read and the next step’s begin keeps the step from starting', async () => {
  const show = await makeDefinition(t.db, {
    program: program([
      'main',
      [
        { kind: 'core.wait', params: { seconds: 1 } },
        { kind: 'core.log', params: { message: 'after the wait' } },
      ],
    ]),
  })
  const runId = (await makeRun(t.db, { definition: show, scheduledFor: new Date() })).id
  const deps = { db: t.db, clock: systemClock }
  let paused: Promise<unknown> | null = null
  // The first begin after the wait (the log step's) waits for a pause made just before it is sent.
  const db = wrapStatements(t.db, 'runQuery', (real) => async (sql, params) => {
    if (paused === null && isBegin(sql.replace(/\s+/g, ' '))) {
      const [wait] = await stepsOf(t.db, runId)
      if (wait?.status === 'completed') {
        paused = pauseRun(deps, runId, 'stage-manager')
        await paused
      }
    }
    return real(sql, params)
  })
  runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 200 })
  runner.start()
  await waitFor(async () => paused, { timeoutMs: 10_000 })
  await waitForStatus(t.db, runId, 'paused')
  // Give the runner time to have begun it, were the begin not guarded.
  await new Promise((resolve) => setTimeout(resolve, 600))
  const [, after] = await stepsOf(t.db, runId)
  expect(after).toMatchObject({ status: 'pending', attempts: 0 })
  expect(after?.startedAt ?? null).toBeNull()

  // Resumed, the run takes the step.
  await resumeRun(deps, runId, 'stage-manager')
  await waitForStatus(t.db, runId, 'completed')
  const [, done] = await stepsOf(t.db, runId)
  expect(done).toMatchObject({ status: 'completed', attempts: 1 })
})
