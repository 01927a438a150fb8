/**
 * A step never moves backwards: once a row says a step is done (completed,
 * failed, skipped, cancelled), no statement of the runner or of a control
 * moves it anywhere else. Watched from inside the database, by a trigger that
 * writes down every such move, since a move made and undone within one
 * transaction (as the start transaction once did with pure steps it had
 * written `completed` and then reopened) is invisible from outside it.
 */
import { beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { cancelRun, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import type { AnyStepKind } from '../src/runner/steps/registry.ts'
import { StepFailure } from '../src/runner/steps/types.ts'
import { useTestDb } from './helpers/db.ts'
import { resetRuns } from './helpers/fixtures.ts'
import {
  controlDeps,
  customKind,
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

beforeAll(async () => {
  await t.db.run(
    'CREATE TABLE IF NOT EXISTS steps_moved_back (step_id BIGINT NOT NULL, from_status VARCHAR(20), to_status VARCHAR(20))',
    [],
  )
  await t.db.run('DROP TRIGGER IF EXISTS steps_never_back', [])
  await t.db.run(
    `CREATE TRIGGER steps_never_back BEFORE UPDATE ON event_run_steps FOR EACH ROW
       IF OLD.status IN ('completed', 'failed', 'skipped', 'cancelled') AND NEW.status <> OLD.status THEN
         INSERT INTO steps_moved_back VALUES (OLD.id, OLD.status, NEW.status);
       END IF`,
    [],
  )
})
beforeEach(async () => {
  await resetRuns(t.db)
  await t.db.run('DELETE FROM steps_moved_back', [])
})

const movedBack = () =>
  t.db.query<{ step_id: number; from_status: string; to_status: string }>(
    'SELECT step_id, from_status, to_status FROM steps_moved_back',
  )

let pureCalls = 0
let impureCalls = 0
const kinds: AnyStepKind[] = [
  // Pure, and its first attempt fails: the start transaction must leave it pending, not done and then undone.
  {
    kind: 'test.flaky-pure',
    sideEffects: false,
    inline: true,
    pure: true,
    validate: () => [],
    async execute(ctx) {
      pureCalls++
      if (pureCalls === 1) throw new StepFailure('first attempt fails')
      await ctx.log('info', 'flaky succeeded')
      return { type: 'completed' }
    },
  },
  customKind('test.flaky', () => {
    impureCalls++
    if (impureCalls === 1) throw new Error('first attempt fails')
  }),
]

describe('a step never moves backwards', () => {
  it('the watch sees a move back when one is made (the check can fail)', async () => {
    const clock = new TestClock()
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(kinds), clock }
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'x' } }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'w' }).tick()
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual(['completed'])
    await t.db.run(`UPDATE event_run_steps SET status = 'pending' WHERE run_id = ?`, [run.id])
    expect(await movedBack()).toHaveLength(1)
  })

  it('through a start whose pure step fails, a retried step, a finished run and a cancelled one', async () => {
    pureCalls = 0
    impureCalls = 0
    const clock = new TestClock()
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(kinds), clock }
    const def = await defineEvent(env, {
      program: program(
        [
          'main',
          [
            { kind: 'core.log', params: { message: 'first' } },
            { kind: 'test.flaky-pure', params: {} },
            { kind: 'core.log', params: { message: 'after' } },
            { kind: 'test.flaky', params: {}, retry: { attempts: 3, backoffSeconds: 1 } },
          ],
        ],
        ['wrap-up', [{ kind: 'core.log', params: { message: 'bye' } }], true],
      ),
    })
    const cued = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'core.log', params: { message: 'hi' } },
          { kind: 'core.cue', params: { prompt: 'go?' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const other = await startRun(controlDeps(env), { definitionId: cued.id, actor: 'op#1' })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'w' })
    await runner.tick()
    expect(pureCalls).toBe(2)
    expect(impureCalls).toBe(1)
    clock.advance(5_000)
    await runner.tick()
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed' })
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual(Array(5).fill('completed'))
    expect((await cancelRun(controlDeps(env), other.id, 'op#1')).applied).toBe(true)
    await runner.tick()
    expect((await stepsOf(t.db, other.id)).map((s) => s.status)).toEqual(['completed', 'cancelled'])
    expect(await movedBack()).toEqual([])
  })
})
