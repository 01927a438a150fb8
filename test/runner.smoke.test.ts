import { expect, it } from 'vitest'
import * as logsSql from '../sql/eventRunLogs.ts'
import * as runsSql from '../sql/eventRuns/index.ts'
import * as stepsSql from '../sql/eventSteps/index.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { resolveCue, startRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb()

it('walks log → cue → resolve → wait → ending → completed', async () => {
  const registry = createDefaultRegistry()
  const deps = { db: t.db, registry, clock: systemClock }
  const def = await createDefinition(
    deps,
    {
      slug: 'smoke',
      title: 'Smoke',
      program: {
        phases: [
          {
            name: 'announce',
            steps: [{ kind: 'core.log', params: { message: 'hello {{definition.title}}' } }],
          },
          {
            name: 'main',
            steps: [
              { kind: 'core.cue', params: { prompt: 'Open the gates' } },
              { kind: 'core.wait', params: { seconds: 1 } },
            ],
          },
          { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
        ],
      },
    },
    'admin#test',
  )
  const runner = new Runner({ db: t.db, registry, tickMs: 50, leaseMs: 5000 })
  runner.start()
  const run = await startRun(
    { ...deps, nudge: () => runner.nudge() },
    { definitionId: def.id, actor: 'op#1' },
  )
  // The cue's step parks in one statement and the run's claim is released in
  // the next, so wait for both: a read between them sees a parked cue on a run
  // that is still claimed.
  let r = run
  for (let i = 0; i < 100 && (r.waitingSteps === 0 || r.claimedBy !== null); i++) {
    await new Promise((res) => setTimeout(res, 50))
    r = (await runsSql.getById(t.db, run.id))!
  }
  expect(r.status).toBe('running')
  expect(r.currentPhase).toBe('main')
  expect(r.claimedBy).toBeNull()
  const steps = await stepsSql.listForRun(t.db, run.id)
  const cue = steps.find((s) => s.kind === 'core.cue')!
  const ans = await resolveCue(
    { db: t.db, clock: systemClock, nudge: () => runner.nudge() },
    cue.id,
    'op#1',
    'go',
  )
  expect(ans.applied).toBe(true)
  for (let i = 0; i < 100 && r.status !== 'completed'; i++) {
    await new Promise((res) => setTimeout(res, 50))
    r = (await runsSql.getById(t.db, run.id))!
  }
  expect(r.status).toBe('completed')
  expect(r.currentPhase).toBe('wrap-up')
  const log = await logsSql.listForRun(t.db, run.id)
  console.log(
    log
      .map((l) => `${l.level} ${l.message}`)
      .reverse()
      .join('\n'),
  )
  await runner.stop()
})
