/**
 * Run alerts written by the statements that end runs (migration 0027 took
 * the trigger away): every path that moves a run into completed, failed or
 * missed, or degrades it, writes one event per run it moved, with its
 * deliveries, in its own transaction; nothing for a run it did not move;
 * nothing at all, and no run read, while no channel is enabled.
 * notify.runAlerts.test.ts follows the same alerts end to end over HTTP.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runsSql from '../sql/eventRuns/index.ts'
import * as channels from '../sql/notifications/channels.ts'
import { runAlertStatements } from '../sql/notifications/runAlerts.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { channelFields, makeDefinition, makeRun, makeRunWithSteps, unique } from './helpers/fixtures.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

/** A channel (its name made unique) listening for every run alert, unless `extra` says otherwise. */
function channel(name: string, extra: Partial<channels.ChannelFields> = {}): channels.ChannelFields {
  return channelFields(unique(name), {
    events: ['RUN_COMPLETED', 'RUN_FAILED', 'RUN_MISSED', 'RUN_DEGRADED'],
    ...extra,
  })
}

interface Alert {
  runId: number
  type: string
  payload: Record<string, unknown>
  deliveries: { channelId: number; status: string; rehearsal: number }[]
}

/** The run alerts written for `ids`, with their deliveries, by run. */
async function alertsOf(db: Db, ids: readonly number[]): Promise<Map<number, Alert[]>> {
  const marks = ids.map(() => '?').join(',')
  const events = await db.query<{ id: number; run_id: number; type: string; payload: unknown }>(
    `SELECT id, run_id, type, payload FROM notification_events WHERE run_id IN (${marks}) ORDER BY id`,
    [...ids],
  )
  const deliveries = await db.query<{
    event_row_id: number
    channel_id: number
    status: string
    rehearsal: number
  }>(
    `SELECT event_row_id, channel_id, status, rehearsal FROM notification_deliveries
      WHERE run_id IN (${marks}) ORDER BY event_row_id, channel_id`,
    [...ids],
  )
  const out = new Map<number, Alert[]>()
  for (const e of events) {
    const alert: Alert = {
      runId: Number(e.run_id),
      type: e.type,
      payload: (typeof e.payload === 'string' ? JSON.parse(e.payload) : e.payload) as Record<string, unknown>,
      deliveries: deliveries
        .filter((d) => Number(d.event_row_id) === Number(e.id))
        .map((d) => ({ channelId: Number(d.channel_id), status: d.status, rehearsal: Number(d.rehearsal) })),
    }
    out.set(alert.runId, [...(out.get(alert.runId) ?? []), alert])
  }
  return out
}

const typesOf = (alerts: Map<number, Alert[]>, id: number) => (alerts.get(id) ?? []).map((a) => a.type)

beforeEach(async () => {
  // Each test says which channels listen.
  await t.db.run('UPDATE notification_channels SET enabled = 0')
})

describe('the start transaction', () => {
  async function startBatch(env: RunnerTestEnv, count: number): Promise<number[]> {
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'tick' } }]]),
    })
    const ids = await materialiseDueRuns(t.db, def, count)
    const runner = new Runner({ db: t.db, registry: env.registry, instanceId: 'alerts', batchSize: 1000 })
    await runner.tick()
    const [ended] = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status = 'completed'`,
      [def.id],
    )
    expect(Number(ended?.n)).toBe(count)
    return ids
  }

  it('writes nothing for a batch it completes while no channel is enabled', async () => {
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: new TestClock() }
    await channels.create(t.db, channel('off', { enabled: false }))
    const ids = await startBatch(env, 40)
    expect((await alertsOf(t.db, ids)).size).toBe(0)
  })

  it('writes one RUN_COMPLETED per run it completes, in the payload the trigger wrote, with a delivery per channel', async () => {
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: new TestClock() }
    const a = await channels.create(t.db, channel('a'))
    const b = await channels.create(t.db, channel('b', { events: ['RUN_COMPLETED'] }))
    await channels.create(t.db, channel('failures only', { events: ['RUN_FAILED'] }))
    const ids = await startBatch(env, 40)
    const alerts = await alertsOf(t.db, ids)
    expect([...alerts.keys()].sort((x, y) => x - y)).toEqual(ids)
    const [run] = await t.db.query<{
      scope: string
      scheduled_for: Date
      slug: string
      title: string
      def: number
    }>(
      `SELECT r.scope, r.scheduled_for, d.slug, d.title, d.id AS def
         FROM event_runs r JOIN event_definitions d ON d.id = r.definition_id WHERE r.id = ?`,
      [ids[0] as number],
    )
    const first = alerts.get(ids[0] as number)?.[0] as Alert
    expect(first.type).toBe('RUN_COMPLETED')
    expect(first.payload).toMatchObject({
      type: 'run.completed',
      event: 'RUN_COMPLETED',
      run: {
        id: String(ids[0]),
        definition: { id: String(run?.def), slug: run?.slug, title: run?.title },
        scope: run?.scope,
        scheduledFor: run?.scheduled_for.toISOString(),
        rehearsal: false,
        status: 'COMPLETED',
        health: 'OK',
        error: null,
      },
      step: null,
      cue: null,
    })
    expect(String(first.payload.occurredAt)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    for (const id of ids) {
      const [one, ...more] = alerts.get(id) ?? []
      expect(more).toEqual([])
      expect(one?.deliveries.map((d) => d.channelId).sort((x, y) => x - y)).toEqual(
        [a, b].sort((x, y) => x - y),
      )
      expect(one?.deliveries.every((d) => d.status === 'PENDING' && d.rehearsal === 0)).toBe(true)
    }
  })
})

describe('the other paths', () => {
  it('a move on the pool (a start that fails) writes its alert with it; a channel narrowed to another definition hears nothing', async () => {
    const listened = await makeDefinition(t.db)
    const other = await makeDefinition(t.db)
    const ch = await channels.create(t.db, channel('one', { definitionIds: [listened.def.id] }))
    const heard = await makeRun(t.db, { definition: listened })
    const unheard = await makeRun(t.db, { definition: other })
    expect(await runsSql.transition(t.db, heard.id, 'scheduled', 'failed', { error: 'broken' })).toBe(true)
    expect(await runsSql.transition(t.db, unheard.id, 'scheduled', 'failed', { error: 'broken' })).toBe(true)
    const alerts = await alertsOf(t.db, [heard.id, unheard.id])
    expect(typesOf(alerts, heard.id)).toEqual(['RUN_FAILED'])
    expect(alerts.get(heard.id)?.[0]?.payload).toMatchObject({ run: { status: 'FAILED', error: 'broken' } })
    expect(alerts.get(heard.id)?.[0]?.deliveries.map((d) => d.channelId)).toEqual([ch])
    expect(alerts.has(unheard.id)).toBe(false)
  })

  it('a batch names runs it does not move: only the moved ones are alerted, and an ended run never twice', async () => {
    await channels.create(t.db, channel('all'))
    const fx = await makeDefinition(t.db)
    const runs = [await makeRun(t.db, { definition: fx }), await makeRun(t.db, { definition: fx })]
    const late = await makeRun(t.db, { definition: fx })
    const ids = runs.map((r) => r.id)
    // The missed sweep's move; one of the three already failed.
    expect(await runsSql.transition(t.db, late.id, 'scheduled', 'failed')).toBe(true)
    expect(
      await runsSql.transitionMany(t.db, [...ids, late.id], 'scheduled', 'missed', { error: 'late' }),
    ).toBe(2)
    // Named again: nothing moves, nothing is written.
    expect(await runsSql.transitionMany(t.db, [...ids, late.id], ['scheduled', 'running'], 'failed')).toBe(0)
    const alerts = await alertsOf(t.db, [...ids, late.id])
    for (const id of ids) expect(typesOf(alerts, id)).toEqual(['RUN_MISSED'])
    expect(typesOf(alerts, late.id)).toEqual(['RUN_FAILED'])
  })

  it('the advance’s batched completion (statements sent with one COMMIT)', async () => {
    await channels.create(t.db, channel('all'))
    const fx = await makeDefinition(t.db)
    const ids = [(await makeRun(t.db, { definition: fx })).id, (await makeRun(t.db, { definition: fx })).id]
    expect(await runsSql.transitionMany(t.db, ids, 'scheduled', 'running')).toBe(2)
    const answers = await t.db.commitAll(
      runsSql.transitionManyStatements(ids, ['running', 'ending'], 'completed'),
    )
    expect(answers[0]?.affectedRows).toBe(2)
    const alerts = await alertsOf(t.db, ids)
    for (const id of ids) expect(typesOf(alerts, id)).toEqual(['RUN_COMPLETED'])
  })

  it('a step that fails its run (failWithStep), a rehearsal’s alert recorded as delivered', async () => {
    await channels.create(t.db, channel('all'))
    const live = await makeRunWithSteps(t.db, 2)
    const rehearsal = await makeRunWithSteps(t.db, 1, { rehearsal: true })
    for (const { run, steps } of [live, rehearsal]) {
      expect(await runsSql.transition(t.db, run.id, 'scheduled', 'running')).toBe(true)
      await t.db.run(`UPDATE event_run_steps SET status = 'running' WHERE id = ?`, [steps[0]?.id as number])
      const out = await runsSql.failWithStep(
        t.db,
        run.id,
        ['running'],
        { id: steps[0]?.id as number, error: 'boom' },
        'step 1 failed',
      )
      expect(out).toEqual({ stepFailed: true, runFailed: true })
    }
    const alerts = await alertsOf(t.db, [live.run.id, rehearsal.run.id])
    expect(typesOf(alerts, live.run.id)).toEqual(['RUN_FAILED'])
    expect(alerts.get(live.run.id)?.[0]?.deliveries.map((d) => d.status)).toEqual(['PENDING'])
    expect(alerts.get(rehearsal.run.id)?.[0]?.payload).toMatchObject({ run: { rehearsal: true } })
    expect(alerts.get(rehearsal.run.id)?.[0]?.deliveries).toEqual([
      expect.objectContaining({ status: 'DELIVERED', rehearsal: 1 }),
    ])
  })

  it('an overlap policy that skips a run (SKIP) misses it with its alert', async () => {
    await channels.create(t.db, channel('all'))
    const fx = await makeDefinition(t.db)
    const base = Date.now() - 5_000
    const first = await makeRun(t.db, { definition: fx, scope: 'stage', scheduledFor: new Date(base) })
    const second = await makeRun(t.db, {
      definition: fx,
      scope: 'stage',
      scheduledFor: new Date(base + 1_000),
    })
    const claim = (id: number, scheduledFor: Date) =>
      runsSql.claimStart(
        t.db,
        { id, concurrencyKey: null, definitionId: fx.def.id, scope: 'stage', scheduledFor, overlap: 'skip' },
        'me',
        new Date(Date.now() + 30_000),
      )
    expect((await claim(first.id, new Date(base))).claimed).toBe(true)
    const skipped = await claim(second.id, new Date(base + 1_000))
    expect(skipped.overlap?.outcome).toBe('skipped')
    const alerts = await alertsOf(t.db, [first.id, second.id])
    expect(typesOf(alerts, second.id)).toEqual(['RUN_MISSED'])
    expect(alerts.has(first.id)).toBe(false)
  })

  it('RUN_DEGRADED once per run, from setHealth and from a failed attempt’s batch; a second degradation writes nothing', async () => {
    const ch = await channels.create(t.db, channel('degraded', { events: ['RUN_DEGRADED'] }))
    const byHealth = await makeRun(t.db)
    const bySteps = await makeRunWithSteps(t.db, 2)
    expect(await runsSql.setHealth(t.db, byHealth.id, 'degraded')).toBe(true)
    expect(await runsSql.setHealth(t.db, byHealth.id, 'degraded')).toBe(false)
    await t.db.run(
      `UPDATE event_run_steps SET status = 'pending', attempts = 1, last_error = 'x' WHERE run_id = ?`,
      [bySteps.run.id],
    )
    // Both steps of one run failed an attempt: one run degraded, one alert.
    expect(
      await runsSql.degradeForSteps(
        t.db,
        bySteps.steps.map((s) => s.id),
      ),
    ).toBe(1)
    // Back to ok, then degraded again, with a second channel enabled meanwhile:
    // the event was written once, and its deliveries with it.
    await channels.create(t.db, channel('later', { events: ['RUN_DEGRADED'] }))
    expect(await runsSql.setHealth(t.db, byHealth.id, 'ok')).toBe(true)
    expect(await runsSql.setHealth(t.db, byHealth.id, 'degraded')).toBe(true)
    const alerts = await alertsOf(t.db, [byHealth.id, bySteps.run.id])
    expect(typesOf(alerts, byHealth.id)).toEqual(['RUN_DEGRADED'])
    expect(alerts.get(byHealth.id)?.[0]?.deliveries.map((d) => d.channelId)).toEqual([ch])
    expect(typesOf(alerts, bySteps.run.id)).toEqual(['RUN_DEGRADED'])
    expect(alerts.get(bySteps.run.id)?.[0]?.payload).toMatchObject({ run: { health: 'DEGRADED' } })
  })
})

describe('with a channel enabled', () => {
  it('the alert statements read the runs they name, not the table, by ids or by steps', async () => {
    await channels.create(t.db, channel('all'))
    const fx = await makeDefinition(t.db)
    const ids = await materialiseDueRuns(t.db, { id: fx.def.id, currentVersionId: fx.version.id }, 500)
    await t.db.run(
      `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, ending, kind, params, status, parked, attempts, last_error, started_at)
       SELECT id, 0, 0, 'main', 0, 'core.log', '{}', 'pending', 0, 1, 'x', NOW(3) FROM event_runs WHERE definition_id = ?`,
      [fx.def.id],
    )
    await t.db.run('ANALYZE TABLE event_runs, event_run_steps')
    const [first, second] = ids as [number, number]
    const steps = await t.db.query<{ id: number }>(
      'SELECT id FROM event_run_steps WHERE run_id IN (?, ?) ORDER BY id',
      [first, second],
    )
    const scans = await t.db.transaction(async (tx) => {
      const scanned = async () =>
        Number(
          (await tx.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'"))[0]?.Value ??
            0,
        )
      const before = await scanned()
      expect(await runsSql.transitionMany(tx, [first], 'scheduled', 'failed')).toBe(1)
      expect(await runsSql.degradeForSteps(tx, [Number(steps[1]?.id)])).toBe(1)
      return (await scanned()) - before
    })
    // A scan of event_runs or event_run_steps reads 500 rows and more; what is
    // read here is the channels' small table, a few times a statement.
    expect(scans).toBeLessThan(300)
    const alerts = await alertsOf(t.db, [first, second])
    expect(typesOf(alerts, first)).toEqual(['RUN_FAILED'])
    expect(typesOf(alerts, second)).toEqual(['RUN_DEGRADED'])
  })
})

describe('with no channel enabled', () => {
  it('the alert statements read no run, however many they name', async () => {
    await channels.create(t.db, channel('off', { enabled: false }))
    const fx = await makeDefinition(t.db)
    const ids = await materialiseDueRuns(t.db, { id: fx.def.id, currentVersionId: fx.version.id }, 500)
    const stamp = 12345
    await t.db.run(`UPDATE event_runs SET status = 'completed', alert_stamp = ? WHERE definition_id = ?`, [
      stamp,
      fx.def.id,
    ])
    const reads = await t.db.transaction(async (tx) => {
      const status = async () =>
        Object.fromEntries(
          (
            await tx.query<{ Variable_name: string; Value: string }>(
              "SHOW SESSION STATUS LIKE 'Handler_read%'",
            )
          ).map((r) => [r.Variable_name, Number(r.Value)]),
        )
      const before = await status()
      const which = runsSql.alertStatementsFor({ type: 'RUN_COMPLETED', stamp }, ids)
      for (const st of which) await tx.runQuery(st.sql, st.params)
      const after = await status()
      return Object.keys(after).reduce((n, k) => n + ((after[k] ?? 0) - (before[k] ?? 0)), 0)
    })
    // The channels' probe and SHOW STATUS itself read a few rows; the 500 runs are not read.
    expect(reads).toBeLessThan(50)
    // And with a channel enabled the same statements do read them, and write their alerts.
    await channels.create(t.db, channel('on', { events: ['RUN_COMPLETED'] }))
    for (const st of runAlertStatements(
      { type: 'RUN_COMPLETED', stamp },
      { sql: 'r.definition_id = ?', args: [fx.def.id] },
    ))
      await t.db.runQuery(st.sql, st.params)
    expect((await alertsOf(t.db, ids)).size).toBe(500)
  })
})
