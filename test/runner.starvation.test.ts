/**
 * No starvation (docs/contract.md, "Beyond those"): with 10,000 runs parked on
 * cues and 2,000 more sleeping on timers, all older than anything new, a newly
 * due run starts within two ticks, keyed or not; a cue resolved among them is
 * picked up just as fast.
 */
import { expect, it } from 'vitest'
import type { NewRun } from '../sql/eventRuns/index.ts'
import * as runsSql from '../sql/eventRuns/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { resolveCue, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const PARKED = 10_000
const SLEEPING = 2_000

const t = useTestDb()

it(`a due run starts within two ticks while ${PARKED} runs are parked on cues and ${SLEEPING} wait on timers`, async () => {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const parkedDef = await defineEvent(env, {
    concurrencyKey: 'crowd:{{run.scope}}',
    graceSeconds: 7 * 24 * 3600,
    program: program(['main', [{ kind: 'core.cue', params: { prompt: 'Waiting' } }]]),
  })
  const sleepingDef = await defineEvent(env, {
    graceSeconds: 7 * 24 * 3600,
    program: program(['main', [{ kind: 'core.wait', params: { seconds: 3600 } }]]),
  })

  // Setup in bulk, as the engine would leave these runs: running, step parked
  // (or sleeping), no lease, run wake_at NULL (parked) or the timer's end.
  const setupStarted = Date.now()
  const old = clock.now().getTime() - 3600_000
  const make = (defId: number, versionId: number, n: number, key: boolean): NewRun[] =>
    Array.from({ length: n }, (_, i) => ({
      definitionId: defId,
      versionId,
      scope: `s${i}`,
      scheduledFor: new Date(old + i),
      timezone: 'UTC',
      concurrencyKey: key ? `crowd:s${i}` : null,
      startedBy: 'schedule',
    }))
  const rows = [
    ...make(parkedDef.id, parkedDef.currentVersionId as number, PARKED, true),
    ...make(sleepingDef.id, sleepingDef.currentVersionId as number, SLEEPING, false),
  ]
  for (let i = 0; i < rows.length; i += 1000) await runsSql.materialiseMany(t.db, rows.slice(i, i + 1000))
  const timerEnd = new Date(clock.now().getTime() + 3600_000)
  await t.db.run(
    `UPDATE event_runs SET status = 'running', current_phase = 'main', started_at = scheduled_for,
            wake_at = IF(definition_id = ?, ?, NULL)
      WHERE definition_id IN (?, ?)`,
    [sleepingDef.id, timerEnd, parkedDef.id, sleepingDef.id],
  )
  await t.db.run(
    `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, ending, kind, params, status, parked, attempts, started_at, wake_at)
     SELECT id, 0, 0, 'main', 0, IF(definition_id = ?, 'core.cue', 'core.wait'),
            IF(definition_id = ?, '{"prompt":"Waiting"}', '{"seconds":3600}'), 'running',
            IF(definition_id = ?, 1, 0), 1, scheduled_for, IF(definition_id = ?, NULL, ?)
       FROM event_runs WHERE definition_id IN (?, ?)`,
    [parkedDef.id, parkedDef.id, parkedDef.id, parkedDef.id, timerEnd, parkedDef.id, sleepingDef.id],
  )
  // Their keys are held, as a started run's would be.
  await t.db.run(
    `INSERT INTO concurrency_locks (lock_key, run_id) SELECT concurrency_key, id FROM event_runs WHERE definition_id = ?`,
    [parkedDef.id],
  )
  const waiting = await listRuns(t.db, { definitionId: parkedDef.id, limit: 1 })
  expect(waiting[0]?.waitingSteps).toBe(1)
  console.log(`starvation: ${PARKED + SLEEPING} idle runs set up in ${Date.now() - setupStarted} ms`)

  // New work, due now: one key-less run, one with a (free) concurrency key.
  const freshDef = await defineEvent(env, {
    program: program(['main', [{ kind: 'core.cue', params: { prompt: 'New show' } }]]),
  })
  const keyedDef = await defineEvent(env, {
    concurrencyKey: 'solo:{{run.scope}}',
    program: program(['main', [{ kind: 'core.cue', params: { prompt: 'Keyed show' } }]]),
  })
  const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'starve' })
  const fresh = await startRun(controlDeps(env), { definitionId: freshDef.id, actor: 'op#1' })
  const keyed = await startRun(controlDeps(env), { definitionId: keyedDef.id, actor: 'op#1' })

  const started = new Set(['running', 'ending', 'completed'])
  let ticks = 0
  const tickTimes: number[] = []
  while (ticks < 2) {
    const t0 = Date.now()
    await runner.tick()
    tickTimes.push(Date.now() - t0)
    ticks++
    clock.advance(1000)
    const [a, b] = [await runOf(t.db, fresh.id), await runOf(t.db, keyed.id)]
    if (started.has(a.status) && started.has(b.status)) break
  }
  console.log(`starvation: new runs started after ${ticks} tick(s) taking ${tickTimes.join(', ')} ms`)
  expect((await runOf(t.db, fresh.id)).status).toBe('running')
  expect((await runOf(t.db, keyed.id)).status).toBe('running')
  expect(ticks).toBeLessThanOrEqual(2)

  // The idle crowd was not touched: no lease taken, no wake time set on a parked run.
  const touched = await t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs
      WHERE definition_id IN (?, ?) AND (claimed_by IS NOT NULL OR status <> 'running'
            OR (definition_id = ? AND wake_at IS NOT NULL))`,
    [parkedDef.id, sleepingDef.id, parkedDef.id],
  )
  expect(Number(touched[0]?.n)).toBe(0)

  // A cue resolved deep in the crowd (the oldest) is acted on at the next tick.
  const [oldest] = await t.db.query<{ id: number }>(
    `SELECT s.id FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id WHERE r.definition_id = ? ORDER BY r.id LIMIT 1`,
    [parkedDef.id],
  )
  const step = await resolveCue(controlDeps(env), Number(oldest!.id), 'op#1')
  expect(step.applied).toBe(true)
  await runner.tick()
  expect((await runOf(t.db, step.step.runId)).status).toBe('completed')
})
