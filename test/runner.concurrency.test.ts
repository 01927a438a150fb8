/**
 * Concurrency keys through the runner, with a hand-moved clock: a blocked run
 * stays SCHEDULED and its log names the holder; it starts when the holder ends,
 * or turns MISSED after its grace window; a rehearsal never takes the key.
 */
import { expect, it } from 'vitest'
import { resolveCue, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

const TICK_MS = 1000
const CUE = program(['main', [{ kind: 'core.cue', params: { prompt: 'Go?' } }]])

async function setup(graceSeconds: number) {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const def = await defineEvent(env, { concurrencyKey: 'world:{{run.scope}}', graceSeconds, program: CUE })
  const runner = new Runner({ db: t.db, registry: env.registry, clock, tickMs: TICK_MS })
  const start = (scope: string, at: Date, rehearsal = false) =>
    startRun(controlDeps(env), { definitionId: def.id, scope, at, rehearsal, actor: 'op#1' })
  return { clock, env, def, runner, start }
}

async function keyRows(key: string) {
  return t.db.query<{ id: number; status: string }>(
    `SELECT id, status FROM event_runs WHERE concurrency_key = ? AND status IN ('starting','running','paused','ending')`,
    [key],
  )
}

it('the second run with the same key stays SCHEDULED, its log names the holder, and it starts when the first ends', async () => {
  const { clock, env, runner, start } = await setup(600)
  const t0 = clock.now()
  const first = await start('w1', t0)
  const second = await start('w1', new Date(t0.getTime() + 1))
  const otherWorld = await start('w2', new Date(t0.getTime() + 1))
  expect(first.concurrencyKey).toBe('world:w1')
  clock.advance(10)
  await runner.tick()

  expect(await runOf(t.db, first.id)).toMatchObject({ status: 'running', waitingSteps: 1 })
  expect(await runOf(t.db, second.id)).toMatchObject({ status: 'scheduled', startedAt: null })
  // Another scope is another key: not blocked.
  expect((await runOf(t.db, otherWorld.id)).status).toBe('running')
  const blockedLog = await logLines(t.db, second.id)
  expect(blockedLog.filter((l) => l.includes(`held by run ${first.id}`))).toHaveLength(1)
  expect(blockedLog.join('\n')).toContain('world:w1')

  // Ticks while the holder is parked keep the second one waiting (and do not repeat the log line).
  for (let i = 0; i < 3; i++) {
    clock.advance(TICK_MS)
    await runner.tick()
  }
  expect((await runOf(t.db, second.id)).status).toBe('scheduled')
  expect((await logLines(t.db, second.id)).filter((l) => l.includes(`held by run ${first.id}`))).toHaveLength(
    1,
  )
  expect(await keyRows('world:w1')).toHaveLength(1)

  // The holder ends; the next tick (a blocked run is retried one tick later) starts the second.
  const [cue] = await stepsOf(t.db, first.id)
  await resolveCue(controlDeps(env), cue!.id, 'op#1')
  await runner.tick()
  expect((await runOf(t.db, first.id)).status).toBe('completed')
  clock.advance(TICK_MS)
  await runner.tick()
  expect(await runOf(t.db, second.id)).toMatchObject({ status: 'running', waitingSteps: 1 })
  expect((await keyRows('world:w1')).map((r) => Number(r.id))).toEqual([second.id])
})

it('a blocked run turns MISSED after its own grace window, with a log naming the holder; a rehearsal is not blocked', async () => {
  const { clock, runner, start } = await setup(5)
  const t0 = clock.now()
  const holder = await start('w9', t0)
  const blocked = await start('w9', new Date(t0.getTime() + 1))
  clock.advance(10)
  await runner.tick()
  expect((await runOf(t.db, holder.id)).status).toBe('running')
  expect((await runOf(t.db, blocked.id)).status).toBe('scheduled')

  // A rehearsal at the same time and scope carries no key: it runs beside the holder.
  const rehearsal = await start('w9', new Date(t0.getTime() + 1), true)
  expect(rehearsal).toMatchObject({ rehearsal: true, concurrencyKey: null })
  await runner.tick()
  expect(await runOf(t.db, rehearsal.id)).toMatchObject({ status: 'running', waitingSteps: 1 })
  expect((await runOf(t.db, blocked.id)).status).toBe('scheduled')

  // Still inside the grace window (scheduled_for + 5 s): not missed yet.
  clock.set(t0.getTime() + 1 + 4000)
  await runner.tick()
  expect((await runOf(t.db, blocked.id)).status).toBe('scheduled')

  // Past it: MISSED, and the log says who held the key.
  clock.set(t0.getTime() + 1 + 5001)
  await runner.tick()
  const missed = await runOf(t.db, blocked.id)
  expect(missed.status).toBe('missed')
  expect(missed.startedAt).toBeNull()
  expect(missed.endedAt).not.toBeNull()
  expect(missed.lastError).toMatch(/grace/)
  const log = await logLines(t.db, blocked.id)
  expect(log.some((l) => l.startsWith('missed') && l.includes(`held by run ${holder.id}`))).toBe(true)
  // The holder is untouched: a run that started is never missed.
  expect((await runOf(t.db, holder.id)).status).toBe('running')
})
