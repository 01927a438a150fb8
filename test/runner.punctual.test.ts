/**
 * Start punctuality: the runner sleeps until the soonest `wake_at` ahead when
 * that comes before its next tick, so a run due between two ticks starts at its
 * time instead of up to TICK_MS late. Real clock, real sleeps.
 */
import { afterEach, expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { sleep } from './helpers/runnerHarness.ts'

const t = useTestDb()
const runners: Runner[] = []
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.stop()))
})

async function oneStepDefinition(slug: string) {
  const registry = createDefaultRegistry()
  const def = await createDefinition(
    { db: t.db, registry, clock: systemClock },
    {
      slug,
      title: slug,
      graceSeconds: 3600,
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'on time' } }] }] },
    },
    'admin#test',
  )
  return { registry, def }
}

/** A scheduled run of `def` in `scope` due at `scheduledFor`, made the way the materialiser makes one. */
function scheduledRun(
  def: { id: number; currentVersionId: number | null },
  scope: string,
  scheduledFor: Date,
) {
  return runsSql.materialise(t.db, {
    definitionId: def.id,
    versionId: def.currentVersionId as number,
    scope,
    scheduledFor,
    timezone: 'UTC',
    concurrencyKey: null,
    params: null,
    rehearsal: false,
    startedBy: 'schedule',
  })
}

/** How late run `id` started after `dueAt`, in ms, waiting up to `waitMs` for it to start. */
async function startLagMs(id: number | null, dueAt: Date, waitMs: number): Promise<number> {
  let run = await runsSql.getById(t.db, id as number)
  for (let waited = 0; waited < waitMs && !run?.startedAt; waited += 10) {
    await sleep(10)
    run = await runsSql.getById(t.db, id as number)
  }
  expect(run?.startedAt).toBeTruthy()
  return (run as { startedAt: Date }).startedAt.getTime() - dueAt.getTime()
}

/** A started runner whose first tick (and its materialisation pass) is done, so what comes due next falls between ticks. */
async function runnerPastFirstTick(registry: ReturnType<typeof createDefaultRegistry>, tickMs: number) {
  const runner = new Runner({ db: t.db, registry, tickMs, leaseMs: 30_000 })
  runners.push(runner)
  runner.start()
  while (runner.lastTick === null) await sleep(5)
  return runner
}

it('starts a run due 300 ms after a tick at its time, not at the next tick (TICK_MS 1000)', async () => {
  const { registry, def } = await oneStepDefinition('punctual')
  const runner = await runnerPastFirstTick(registry, 1000)
  const dueAt = new Date(Date.now() + 300)
  const id = await scheduledRun(def, 'room-1', dueAt)
  // Made by someone other than this runner after its tick: the same as an API start, which nudges.
  runner.nudge()
  expect(id).not.toBeNull()
  const lateMs = await startLagMs(id, dueAt, 2000)
  expect(lateMs).toBeGreaterThanOrEqual(0)
  // On a quiet machine about 5 ms; the bound leaves room for a loaded CI box.
  // Without aiming the sleep the run starts at the next tick, about 700 ms late.
  expect(lateMs).toBeLessThan(200)
})

it('wakes for a timer that runs out between ticks (core.wait), not at the next tick', async () => {
  const registry = createDefaultRegistry()
  const def = await createDefinition(
    { db: t.db, registry, clock: systemClock },
    {
      slug: 'punctual-wait',
      title: 'punctual wait',
      graceSeconds: 3600,
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.wait', params: { seconds: 0.3 } },
              { kind: 'core.log', params: { message: 'after' } },
            ],
          },
        ],
      },
    },
    'admin#test',
  )
  const runner = await runnerPastFirstTick(registry, 2000)
  const dueAt = new Date(Date.now() + 100)
  const id = await scheduledRun(def, 'room-2', dueAt)
  runner.nudge()
  let run = await runsSql.getById(t.db, id as number)
  for (let i = 0; i < 300 && run?.status !== 'completed'; i++) {
    await sleep(10)
    run = await runsSql.getById(t.db, id as number)
  }
  expect(run?.status).toBe('completed')
  // Due at +100 ms, then a 300 ms wait: done near +400 ms; waking only on ticks
  // (TICK_MS 2000) it would end at the next one, about 1,900 ms after it came due.
  const doneMs = (run as { endedAt: Date }).endedAt.getTime() - dueAt.getTime()
  expect(doneMs).toBeLessThan(1000)
})

it('starts a run that came due while a pass was busy right after that pass, not at the next wake-up', async () => {
  const registry = createDefaultRegistry()
  // A step that keeps its pass busy for 400 ms (a slow receiver, a loaded machine).
  registry.register({
    kind: 'test.slow',
    sideEffects: false,
    validate: () => [],
    async execute() {
      await sleep(400)
      return { type: 'completed' }
    },
  })
  const slow = await createDefinition(
    { db: t.db, registry, clock: systemClock },
    {
      slug: 'slow-pass',
      title: 'slow pass',
      graceSeconds: 3600,
      program: { phases: [{ name: 'main', steps: [{ kind: 'test.slow', params: {} }] }] },
    },
    'admin#test',
  )
  const { def } = await oneStepDefinition('due-mid-pass')
  const runner = await runnerPastFirstTick(registry, 1000)
  const slowDue = new Date(Date.now() + 200)
  const dueMidPass = new Date(slowDue.getTime() + 100)
  await scheduledRun(slow, 'busy', slowDue)
  const id = await scheduledRun(def, 'room-3', dueMidPass)
  // Something due well after the pass, which the sleep would otherwise aim at.
  await scheduledRun(def, 'later', new Date(slowDue.getTime() + 5_000))
  runner.nudge()
  const lateMs = await startLagMs(id, dueMidPass, 3000)
  // The pass that starts the slow run is busy until about +400 ms after the
  // run below came due: it starts then, about 300 ms late. Were the sleep
  // aimed past the instant it was read, it would start at the next tick,
  // about 900 ms late.
  expect(lateMs).toBeGreaterThanOrEqual(0)
  expect(lateMs).toBeLessThan(650)
})

it('says how long its sleep has left, aimed at the next due run (the quiet collection waits on it)', async () => {
  const { registry, def } = await oneStepDefinition('punctual-asleep')
  const runner = await runnerPastFirstTick(registry, 1000)
  await scheduledRun(def, 'room-1', new Date(Date.now() + 400))
  runner.nudge()
  // Past the nudged pass, asleep until the run 400 ms ahead: never more than that.
  let asleep = 0
  for (let i = 0; i < 100 && asleep === 0; i++) {
    await sleep(5)
    asleep = runner.asleepForMs
  }
  expect(asleep).toBeGreaterThan(0)
  expect(asleep).toBeLessThanOrEqual(400)
})
