/**
 * A run's completion is news of its own. The runner writes it at the start of
 * the round after its last step's outcome, and the live feeds are woken by
 * the hooks that say something changed (`stepFinished`, then the batch's or
 * the tick's end). A tick ending between the last outcome and the completion
 * used to take the news with it: the completion was written after and told
 * nobody, and a subscriber waited for its next poll (30 s by default) to see
 * the run COMPLETED. The write of runs finished or moved into a phase now
 * says so itself (`runsMoved`), after it is made.
 */
import { expect, it } from 'vitest'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  runOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

it('the completion of a run, and its move into the ending phase, are told once written', async () => {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program(
      ['show', [{ kind: 'core.wait', params: { seconds: 1 } }]],
      ['wrap-up', [{ kind: 'core.log', params: { message: 'that was the show' } }], true],
    ),
  })
  const [id] = (await materialiseDueRuns(t.db, def, 1)) as [number]
  const hooks: string[] = []
  /** The run's status as each `runsMoved` found it (read at once, in order). */
  const seen: Promise<string>[] = []
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    clock,
    instanceId: 'runs-moved',
    observer: {
      stepFinished: (kind, how) => void hooks.push(`${kind}:${how}`),
      runsMoved: () => {
        hooks.push('runsMoved')
        seen.push(runOf(t.db, id).then((r) => r.status))
      },
    },
  })
  await runner.tick()
  clock.advance(1000)
  await runner.tick()
  expect((await runOf(t.db, id)).status).toBe('completed')
  // The last thing told is the completion, after the last step's outcome.
  expect(hooks.at(-1)).toBe('runsMoved')
  expect(hooks.lastIndexOf('core.log:completed')).toBeLessThan(hooks.lastIndexOf('runsMoved'))
  const statuses = await Promise.all(seen)
  expect(statuses.at(-1)).toBe('completed')
  // Entering the ending phase was told too, before the completion.
  expect(statuses).toContain('ending')
})
