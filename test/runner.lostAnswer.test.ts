/**
 * The database goes away in the middle of answering a step's begin: the UPDATE
 * committed, the reply was lost. Nothing ran, so the step must not read as an
 * attempt under way (leased, counted against its retries): the engine puts it
 * back as it was once the database answers, and the next tick runs it as its
 * first attempt.
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { connectionLostError, useTestDb, wrapStatements } from './helpers/db.ts'
import {
  controlDeps,
  customKind,
  defineEvent,
  makeRegistry,
  program,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

/** The real pool, except that the first step begin commits and then "loses" its answer. */
function losingFirstBeginAnswer(db: Db): { db: Db; lost: () => number } {
  let lost = 0
  const losing: Parameters<typeof wrapStatements>[2] = (real) => async (sql, args) => {
    const res = await real(sql, args)
    if (lost === 0 && /SET status = 'running', attempts = attempts \+ 1/.test(sql)) {
      lost++
      throw connectionLostError()
    }
    return res
  }
  // One step's begin (the per-run engine) and many steps' (a batch).
  const proxy = wrapStatements(wrapStatements(db, 'run', losing), 'runQuery', losing)
  return { db: proxy, lost: () => lost }
}

it('a begin whose answer was lost is put back: no lease, no attempt counted, and it runs once, as attempt 1', async () => {
  let calls = 0
  const registry = makeRegistry([
    customKind(
      'test.effect',
      () => {
        calls++
      },
      { sideEffects: true },
    ),
  ])
  const clock = new TestClock()
  const env = { db: t.db, registry, clock }
  const def = await defineEvent(env, { program: program(['main', [{ kind: 'test.effect', params: {} }]]) })
  const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })

  const flaky = losingFirstBeginAnswer(t.db)
  // The batch's begin lost its answer: the tick gives its claims back and fails (the loop backs off).
  await expect(
    new Runner({ db: flaky.db, registry, clock, instanceId: 'lost-answer' }).tick(),
  ).rejects.toThrow(/unavailable/)
  expect(flaky.lost()).toBe(1)
  expect(calls).toBe(0)
  const [step] = await stepsOf(t.db, run.id)
  expect(step).toMatchObject({ status: 'pending', attempts: 0, claimedBy: null, claimExpiresAt: null })

  clock.advance(1000)
  await new Runner({ db: t.db, registry, clock, instanceId: 'next' }).tick()
  expect(calls).toBe(1)
  expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.attempts])).toEqual([['completed', 1]])
  expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed', health: 'ok' })
})
