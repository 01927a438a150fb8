/**
 * The pause/complete race: a run whose last step is done completes, and a
 * pause or cancel that loses to that answers applied: false. Raced on real
 * concurrent connections (the runner's writes on one pool, the person's
 * control on another), many times, in each order the runner writes in: the
 * last step's completion before the run's, and (a batch) the run's first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { bulkRuns } from '../src/operations/bulk.ts'
import { cancelRun, pauseRun, resumeRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { type DefinitionFixture, makeDefinition, makeRunningRunWithSteps } from './helpers/fixtures.ts'

const ROUNDS = 60
let t: TestDb
let runner: Db
let person: Db
let fx: DefinitionFixture

beforeAll(async () => {
  t = await createTestDb()
  runner = t.open()
  person = t.open()
  fx = await makeDefinition(t.db)
})
afterAll(async () => {
  await t.drop()
})

/** A running run of two steps: the first completed, the last running (or done, with `lastDone`). */
async function runAtItsLastStep(
  lastDone: boolean,
  definition: DefinitionFixture = fx,
): Promise<{ runId: number; lastStepId: number }> {
  const {
    run,
    steps: [first, last],
  } = await makeRunningRunWithSteps(t.db, 2, { definition })
  await t.db.execute(`UPDATE event_run_steps SET status = 'completed', ended_at = NOW(3) WHERE id = ?`, [
    first!.id,
  ])
  await t.db.execute(`UPDATE event_run_steps SET status = ?, attempts = 1 WHERE id = ?`, [
    lastDone ? 'completed' : 'running',
    last!.id,
  ])
  return { runId: run.id, lastStepId: last!.id }
}

const finish = (runId: number) => runs.transition(runner, runId, ['running', 'ending'], 'completed')
const control = (what: 'pause' | 'cancel', runId: number) =>
  (what === 'pause' ? pauseRun : cancelRun)({ db: person, clock: systemClock }, runId, 'operator#race')

async function outcome(runId: number) {
  const run = await runs.getById(t.db, runId)
  const all = await steps.listForRun(t.db, runId)
  return { status: run?.status, allDone: all.every((s) => s.status === 'completed') }
}

describe.each(['pause', 'cancel'] as const)('%s against completion', (what) => {
  it(`the last step already done: the run completes and the ${what} answers applied: false, every time`, async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const { runId } = await runAtItsLastStep(true)
      const [answer] = await Promise.all([control(what, runId), finish(runId)])
      expect(answer.applied).toBe(false)
      expect(await outcome(runId)).toEqual({ status: 'completed', allDone: true })
    }
  })

  it(`the last step in flight (step then run, or run then step): the answer and the end agree (${what === 'pause' ? 'applied: PAUSED, then completed on resume' : 'applied: CANCELLED with a step unfinished'}; else COMPLETED)`, async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const { runId, lastStepId } = await runAtItsLastStep(false)
      const runnerWrites =
        i % 2 === 0
          ? async () => {
              await steps.complete(runner, lastStepId, { ok: true })
              await finish(runId)
            }
          : async () => {
              await finish(runId)
              await steps.complete(runner, lastStepId, { ok: true })
            }
      const [answer] = await Promise.all([control(what, runId), runnerWrites()])
      const end = await outcome(runId)
      if (what === 'pause' && answer.applied) {
        // A pause that was applied holds: the step in flight ends, the run stays paused, and completes once resumed.
        expect(end).toEqual({ status: 'paused', allDone: true })
        const resumed = await resumeRun({ db: person, clock: systemClock }, runId, 'operator#race')
        expect(resumed.applied).toBe(true)
        expect(await finish(runId)).toBe(true)
        expect(await outcome(runId)).toEqual({ status: 'completed', allDone: true })
      } else if (what === 'pause') {
        expect(end).toEqual({ status: 'completed', allDone: true })
      } else if (answer.applied) {
        expect(end).toEqual({ status: 'cancelled', allDone: false })
      } else {
        expect(end).toEqual({ status: 'completed', allDone: true })
      }
    }
  })
})

describe.each(['pause', 'cancel'] as const)('bulk %s against completion', (what) => {
  it(`the last step already done: a bulk ${what} applies to none, and the run completes`, async () => {
    for (let i = 0; i < 20; i++) {
      const own = await makeDefinition(t.db)
      const { runId } = await runAtItsLastStep(true, own)
      const [answer] = await Promise.all([
        bulkRuns(
          { db: person, clock: systemClock },
          { action: what, filter: { definitionId: own.def.id }, dryRun: false, actor: 'operator#race' },
        ),
        finish(runId),
      ])
      expect(answer.applied).toBe(0)
      expect(await outcome(runId)).toEqual({ status: 'completed', allDone: true })
    }
  })
})
