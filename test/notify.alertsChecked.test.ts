/**
 * Run alerts asked once per statement (migration 0027): a statement that ends
 * runs stamps `alerts_checked` with whether any channel was enabled when it
 * ran, and the trigger skips its per-row check only for the runs that very
 * statement stamped 1. What a channel receives must not change: every run
 * ended while a channel listens is alerted, however it was ended.
 */
import { expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import * as channels from '../sql/notifications/channels.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

const RUNS = 40

function channel(name: string, extra: Partial<channels.ChannelFields> = {}): channels.ChannelFields {
  return {
    name,
    kind: 'WEBHOOK',
    target: 'http://127.0.0.1:9/x',
    events: ['RUN_COMPLETED', 'RUN_FAILED'],
    definitionIds: null,
    teams: null,
    lateStartSeconds: 60,
    signingSecret: null,
    enabled: true,
    ...extra,
  }
}

/** The runs' `alerts_checked` stamps, and the run alerts written for them, by type. */
async function alertsOf(
  ids: readonly number[],
): Promise<{ checked: number[]; events: Map<number, string[]> }> {
  const stamps = await t.db.query<{ alerts_checked: number }>(
    `SELECT alerts_checked FROM event_runs WHERE id IN (${ids.map(() => '?').join(',')}) ORDER BY id`,
    [...ids],
  )
  const rows = await t.db.query<{ run_id: number; type: string }>(
    `SELECT run_id, type FROM notification_events WHERE run_id IN (${ids.map(() => '?').join(',')}) ORDER BY id`,
    [...ids],
  )
  const events = new Map<number, string[]>()
  for (const r of rows) events.set(Number(r.run_id), [...(events.get(Number(r.run_id)) ?? []), r.type])
  return { checked: stamps.map((s) => Number(s.alerts_checked)), events }
}

/** A batch of single-step runs of a fresh definition, due now, started by one runner tick. */
async function startBatch(env: RunnerTestEnv): Promise<number[]> {
  const def = await defineEvent(env, {
    program: program(['main', [{ kind: 'core.log', params: { message: 'tick' } }]]),
  })
  const ids = await materialiseDueRuns(t.db, def, RUNS)
  const runner = new Runner({ db: t.db, registry: env.registry, instanceId: 'alerts', batchSize: 1000 })
  await runner.tick()
  const ended = await t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status = 'completed'`,
    [def.id],
  )
  expect(Number(ended[0]?.n)).toBe(RUNS)
  return ids
}

it('a start batch with no channel enabled writes no alert and stamps every run it ended as checked', async () => {
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: new TestClock() }
  // A channel that is off does not listen.
  await channels.create(t.db, channel('off', { enabled: false }))
  const ids = await startBatch(env)
  const { checked, events } = await alertsOf(ids)
  expect(checked).toEqual(ids.map(() => 1))
  expect(events.size).toBe(0)
})

it('with a channel enabled, the same batch writes one RUN_COMPLETED per run and stamps none', async () => {
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: new TestClock() }
  await channels.create(t.db, channel('on'))
  const ids = await startBatch(env)
  const { checked, events } = await alertsOf(ids)
  expect(checked).toEqual(ids.map(() => 0))
  expect([...events.keys()].sort((a, b) => a - b)).toEqual(ids)
  for (const types of events.values()) expect(types).toEqual(['RUN_COMPLETED'])
})

it('a statement that found a channel leaves the per-definition filter to the trigger, run by run', async () => {
  // The only enabled channel listens to one definition: a statement ending
  // runs of two definitions stamps 0 (a channel is enabled), and the trigger
  // then writes alerts for the listened definition's runs only.
  await t.db.run('UPDATE notification_channels SET enabled = 0')
  const listened = await makeDefinition(t.db)
  const other = await makeDefinition(t.db)
  await channels.create(t.db, channel('one-definition', { definitionIds: [listened.def.id] }))
  const runs = [
    await makeRun(t.db, { definition: listened }),
    await makeRun(t.db, { definition: other }),
    await makeRun(t.db, { definition: listened }),
  ]
  const ids = runs.map((r) => r.id)
  expect(await runsSql.transitionMany(t.db, ids, 'scheduled', 'failed', { error: 'broken' })).toBe(3)
  const { checked, events } = await alertsOf(ids)
  expect(checked).toEqual([0, 0, 0])
  expect(events.get(ids[0] as number)).toEqual(['RUN_FAILED'])
  expect(events.has(ids[1] as number)).toBe(false)
  expect(events.get(ids[2] as number)).toEqual(['RUN_FAILED'])
})

it('only the ending statement’s own stamp silences the trigger: a stamp left earlier, or none, is alerted', async () => {
  await t.db.run('UPDATE notification_channels SET enabled = 0')
  await channels.create(t.db, channel('everything'))
  // A run carrying a stamp from before (OLD 1): the statement that ends it
  // found a channel and stamps 0, the trigger alerts.
  const stale = await makeRun(t.db)
  await t.db.run(`UPDATE event_runs SET status = 'running', alerts_checked = 1 WHERE id = ?`, [stale.id])
  expect(await runsSql.transitionMany(t.db, [stale.id], 'running', 'failed', { error: 'x' })).toBe(1)
  // A run ended by a statement that does not stamp the column at all (OLD 1 = NEW 1).
  const unstamped = await makeRun(t.db)
  await t.db.run(`UPDATE event_runs SET status = 'running', alerts_checked = 1 WHERE id = ?`, [unstamped.id])
  await t.db.run(`UPDATE event_runs SET status = 'failed', ended_at = NOW(3) WHERE id = ?`, [unstamped.id])
  const { events } = await alertsOf([stale.id, unstamped.id])
  expect(events.get(stale.id)).toEqual(['RUN_FAILED'])
  expect(events.get(unstamped.id)).toEqual(['RUN_FAILED'])
})
