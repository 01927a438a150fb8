/**
 * Rehearsal at speed on the runner's own tick with a hand-moved clock: a cue
 * deadline is scaled by 1/speed (a 10-minute cue times out after 10 s at 60),
 * while an ordinary run's is not.
 */
import { expect, it } from 'vitest'
import { startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

it('a cue deadline runs 1/speed as long in a rehearsal at speed, and at full length otherwise', async () => {
  const clock = new TestClock('2027-05-01T10:00:00Z')
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const runner = new Runner({ db: t.db, registry: env.registry, clock })
  const def = await defineEvent(env, {
    program: program([
      'main',
      [{ kind: 'core.cue', params: { prompt: 'house lights?', timeoutSeconds: 600, onTimeout: 'continue' } }],
    ]),
  })
  const fast = await startRun(controlDeps(env), {
    definitionId: def.id,
    rehearsal: true,
    speed: 60,
    actor: 'op',
  })
  const real = await startRun(controlDeps(env), { definitionId: def.id, scope: 'b', actor: 'op' })
  expect(fast.speed).toBe(60)
  expect(real.speed).toBe(1)
  await runner.tick()
  const [fastCue] = await stepsOf(t.db, fast.id)
  const [realCue] = await stepsOf(t.db, real.id)
  expect(fastCue?.startedAt).toBeInstanceOf(Date)
  expect(fastCue?.wakeAt?.getTime()).toBe(Number(fastCue?.startedAt?.getTime()) + 10_000)
  expect(realCue?.wakeAt?.getTime()).toBe(Number(realCue?.startedAt?.getTime()) + 600_000)
  clock.advance(10_001)
  await runner.tick()
  await runner.tick()
  expect((await runOf(t.db, fast.id)).status).toBe('completed')
  expect((await runOf(t.db, real.id)).status).toBe('running')
})
