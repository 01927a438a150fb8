/**
 * Keyed due runs are found by their own query: behind a backlog of 3,000 due
 * key-less runs (more than one tick starts), a due run with a concurrency key
 * whose key is free starts on the first tick, inside its 2 s grace, instead of
 * waiting behind the backlog until it is marked missed.
 */
import { expect, it } from 'vitest'
import type { NewRun } from '../sql/eventRuns/index.ts'
import * as runsSql from '../sql/eventRuns/index.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  customKind,
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const BACKLOG = 3_000
const t = useTestDb()

it(`a keyed due run starts within its 2 s grace behind ${BACKLOG} due key-less runs`, async () => {
  const clock = new TestClock()
  // A step kind the batch path cannot take inline: each run goes through the per-run engine.
  const registry = makeRegistry([customKind('test.slow', () => new Promise((r) => setImmediate(r)))])
  const env: RunnerTestEnv = { db: t.db, registry, clock }
  const backlogDef = await defineEvent(env, {
    graceSeconds: 24 * 3600,
    program: program(['main', [{ kind: 'test.slow', params: {} }]]),
  })
  const keyedDef = await defineEvent(env, {
    concurrencyKey: 'stage:{{run.scope}}',
    graceSeconds: 2,
    program: program(['main', [{ kind: 'core.log', params: { message: 'on stage' } }]]),
  })
  const now = clock.now().getTime()
  const backlog: NewRun[] = Array.from({ length: BACKLOG }, (_, i) => ({
    definitionId: backlogDef.id,
    versionId: backlogDef.currentVersionId as number,
    scope: `s${i}`,
    scheduledFor: new Date(now - 60_000 + i),
    timezone: 'UTC',
    concurrencyKey: null,
    startedBy: 'schedule',
  }))
  for (let i = 0; i < backlog.length; i += 1000)
    await runsSql.materialiseMany(t.db, backlog.slice(i, i + 1000))
  const keyedId = await runsSql.materialise(t.db, {
    definitionId: keyedDef.id,
    versionId: keyedDef.currentVersionId as number,
    scope: 'main',
    scheduledFor: new Date(now - 500),
    timezone: 'UTC',
    concurrencyKey: 'stage:main',
    startedBy: 'schedule',
  })
  expect(keyedId).not.toBeNull()

  const runner = new Runner({ db: t.db, registry, clock, instanceId: 'keyed', batchSize: 20 })
  await runner.tick()
  const scheduledLeft = await t.db.query<{ n: number }>(
    "SELECT COUNT(*) AS n FROM event_runs WHERE status = 'scheduled' AND concurrency_key IS NULL",
  )
  // The backlog outlasts the tick (so the keyed run was not reached by draining it).
  expect(Number(scheduledLeft[0]?.n)).toBeGreaterThan(1000)
  // Past the grace window: a run still scheduled now would be marked missed.
  clock.advance(3_000)
  await runner.tick()
  const keyed = await runOf(t.db, keyedId as number)
  expect(keyed.status).toBe('completed')
  expect(keyed.startedAt).not.toBeNull()
}, 60_000)

it('findDueKeyed reads only due keyed scheduled runs, through their own index', async () => {
  const [plan] = await t.db.query<{ key: string | null; rows: number }>(
    `EXPLAIN SELECT id FROM event_runs FORCE INDEX (idx_evrun_keyed_due)
      WHERE keyed_due_at <= NOW(3) AND status = 'scheduled' AND concurrency_key IS NOT NULL
      ORDER BY keyed_due_at, id LIMIT 50`,
  )
  expect(plan?.key).toBe('idx_evrun_keyed_due')
  const due = await runsSql.findDueKeyed(t.db, new Date(Date.now() + 3_600_000), 500)
  for (const r of due) expect(r).toMatchObject({ status: 'scheduled', concurrencyKey: expect.any(String) })
})
