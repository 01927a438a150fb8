/**
 * An idle instance costs the same on day 1 and day 1,000: every statement of an
 * idle tick, of a `/metrics` scrape, of `/readyz` and of the `health` query
 * reads a number of rows that does not grow with the finished runs nor with the
 * runs scheduled ahead.
 *
 * The measure is rows read by the server (the session's `Handler_read_*`
 * counters, summed), not time: each statement runs on a pool of one connection,
 * so the session's counters are exactly its own. The same statements are
 * measured at three sizes, built up in place: 1,000 finished runs; 200,000
 * finished runs; 200,000 finished runs and 50,000 scheduled 1 to 15 hours
 * ahead. A statement fails when the larger size reads more than 1.5 times the
 * smaller (with a floor of {@link FLOOR} rows, for statements that read almost
 * nothing: 3 rows against 1 is no growth).
 *
 * The first run-count of a process counts the whole table once (src/runCounts.ts);
 * each size warms it before measuring, as a running process would have.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { pendingMigrations } from '../sql/migrate.ts'
import * as heartbeats from '../sql/runnerHeartbeats.ts'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { materialiseAll } from '../src/runner/materialise.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { type App, buildApp } from '../src/server.ts'
import { useTestDb } from './helpers/db.ts'
import { type DefinitionFixture, makeDefinition } from './helpers/fixtures.ts'
import { SHOWRUNNER_TOKENS, TOKENS } from './helpers/server.ts'

/** Below this many rows a statement reads "almost nothing"; the ratio is taken against it. */
const FLOOR = 30
const RATIO = 1.5

const t = useTestDb()

type Size = 'small' | 'large' | 'ahead'
const SIZES: Size[] = ['small', 'large', 'ahead']
const read: Record<Size, Record<string, number>> = { small: {}, large: {}, ahead: {} }

let m: Db
let measuring: Db | null = null
let defs: DefinitionFixture[]
const NOW = new Date()
const registry = createDefaultRegistry()

/** Rows the server read on `m`'s one connection while `fn` ran. */
async function rowsRead(fn: () => Promise<unknown>): Promise<number> {
  const counters = async () => {
    const rows = await m.query<{ Variable_name: string; Value: string }>(
      "SHOW SESSION STATUS LIKE 'Handler_read%'",
    )
    return rows.reduce((sum, r) => sum + Number(r.Value), 0)
  }
  const before = await counters()
  await fn()
  return (await counters()) - before
}

/** Finished runs with seq in [from, to] of the sequence table: newest first, 20 s apart, one step each, and a log line each if they ended within 30 days. */
async function addHistory(from: number, to: number): Promise<void> {
  const d = defs.map((f) => f.def.id).join(', ')
  const v = defs.map((f) => f.version.id).join(', ')
  await t.db.runQuery(
    `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, status, health,
            current_phase, started_by, started_at, ended_at, created_at, updated_at, start_reserve)
     SELECT ELT(1 + seq % 5, ${d}), ELT(1 + seq % 5, ${v}), '', ? - INTERVAL seq * 20 SECOND, 'UTC',
            ELT(1 + seq % 10, 'completed', 'completed', 'completed', 'completed', 'completed',
                'completed', 'completed', 'failed', 'cancelled', 'missed'),
            IF(seq % 50 = 0, 'degraded', 'ok'), 'main', 'schedule',
            ? - INTERVAL seq * 20 SECOND, ? - INTERVAL seq * 20 - 2 SECOND, ? - INTERVAL seq * 20 + 3600 SECOND,
            ? - INTERVAL seq * 20 - 2 SECOND, NULL
       FROM seq_${from}_to_${to}`,
    // updated_at as the service leaves it: last written when the run ended.
    [NOW, NOW, NOW, NOW, NOW],
  )
  await t.db.runQuery(
    `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, kind, status, attempts, started_at, ended_at)
     SELECT r.id, 0, 0, 'main', 'core.log', 'completed', 1, r.started_at, r.ended_at
       FROM event_runs r LEFT JOIN event_run_steps s ON s.run_id = r.id
      WHERE r.status IN ('completed', 'failed') AND s.id IS NULL`,
  )
  // The log as retention leaves it: lines of the last 30 days only, oldest first.
  await t.db.runQuery('DELETE FROM event_run_logs')
  await t.db.runQuery(
    `INSERT INTO event_run_logs (run_id, at, level, message)
     SELECT id, ended_at, 'info', 'finished' FROM event_runs
      WHERE ended_at >= ? - INTERVAL 30 DAY ORDER BY ended_at, id`,
    [NOW],
  )
  await t.db.runQuery('ANALYZE TABLE event_runs, event_run_steps, event_run_logs')
}

/** 50,000 runs scheduled 1 to 15 hours ahead, made an hour ago by materialisation. */
async function addAhead(): Promise<void> {
  const d = defs.map((f) => f.def.id).join(', ')
  const v = defs.map((f) => f.version.id).join(', ')
  await t.db.runQuery(
    `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, started_by,
            missed_at, created_at, updated_at)
     SELECT ELT(1 + seq % 5, ${d}), ELT(1 + seq % 5, ${v}), '', ? + INTERVAL 3600 + seq SECOND, 'UTC', 'schedule',
            ? + INTERVAL 3900 + seq SECOND, ? - INTERVAL 1 HOUR, ? - INTERVAL 1 HOUR
       FROM seq_1_to_50000`,
    [NOW, NOW, NOW, NOW],
  )
  await t.db.runQuery('ANALYZE TABLE event_runs')
}

/** Runs in flight, the same at every size: parked on a cue (one degraded), and one waiting out a timer. */
async function addLive(): Promise<void> {
  for (const [i, f] of defs.slice(0, 3).entries()) {
    const id = await runs.materialise(t.db, {
      definitionId: f.def.id,
      versionId: f.version.id,
      scope: `live-${i}`,
      scheduledFor: new Date(NOW.getTime() - 60_000),
      timezone: 'UTC',
      concurrencyKey: null,
    })
    if (id === null) throw new Error('live run not made')
    await runs.transition(t.db, id, 'scheduled', 'running', {
      wakeAt: i === 2 ? new Date(NOW.getTime() + 60_000) : null,
    })
    if (i === 0) await runs.setHealth(t.db, id, 'degraded')
    await t.db.run(
      `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, kind, status, parked, attempts, started_at)
       VALUES (?, 0, 0, 'main', 'core.cue', 'running', ?, 1, ?)`,
      [id, i === 2 ? 0 : 1, new Date(NOW.getTime() - 30_000)],
    )
  }
}

async function startApp(): Promise<{ app: App; url: string }> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: t.url,
    SHOWRUNNER_TOKENS,
    RUNNER: 'off',
    LOG_LEVEL: 'silent',
  })
  const app = buildApp(config, { db: m, logger: silentLogger() })
  const { url } = await app.start()
  return { app, url }
}

async function health(url: string): Promise<void> {
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKENS.viewer}` },
    body: JSON.stringify({
      query: '{ health { ok runsByStatus degradedRuns waitingSteps oldestWaitingStepAt runners { id } } }',
    }),
  })
  const body = (await res.json()) as { errors?: unknown }
  if (res.status !== 200 || body.errors) throw new Error(`health failed: ${JSON.stringify(body)}`)
}

async function get(url: string): Promise<void> {
  const res = await fetch(url)
  await res.text()
  if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}`)
}

/** Every statement kind, measured at the current size. */
async function measureAll(size: Size): Promise<void> {
  // A pool of its own per size: the server's run counter (one per pool) then
  // starts with a full count of this size, as a process running on it would have.
  await measuring?.close()
  m = t.open({ connectionLimit: 1 })
  measuring = m
  const r = read[size]
  const leaseUntil = new Date(NOW.getTime() + 30_000)
  r['runs: reclaim stale leases'] = await rowsRead(() => runs.reclaimStale(m))
  r['steps: reclaim stale leases'] = await rowsRead(() => steps.reclaimStale(m))
  r['materialisation check'] = await rowsRead(() => materialiseAll(m, NOW, 24 * 3600_000, () => {}))
  r['missed sweep'] = await rowsRead(() => runs.findMissed(m, NOW, 500))
  r['lease due in-flight runs'] = await rowsRead(() =>
    runs.claimTickBatch(m, 'measure', `measure-${size}`, leaseUntil, NOW, 200),
  )
  r['lock due key-less runs'] = await rowsRead(() => m.transaction((tx) => runs.lockDueToStart(tx, NOW, 200)))
  r['due keyed runs'] = await rowsRead(() => runs.findDueKeyed(m, NOW, 200))
  r['due runs of every kind'] = await rowsRead(() => runs.findDue(m, NOW, 200))
  r['log retention: oldest lines'] = await rowsRead(() => logs.oldestLines(m, 0, 1000))
  r['heartbeat'] = await rowsRead(() =>
    heartbeats.beat(m, { instanceId: 'measure', host: 'h', pid: 1, startedAt: NOW, tickLagMs: 0 }),
  )
  r['heartbeat prune'] = await rowsRead(() =>
    heartbeats.pruneBefore(m, new Date(NOW.getTime() - 7 * 86_400_000)),
  )
  r['live runners'] = await rowsRead(() => heartbeats.listLive(m, new Date(NOW.getTime() - 30_000)))
  r['degraded runs'] = await rowsRead(() => runs.countDegraded(m))
  r['waiting steps'] = await rowsRead(() => steps.waitingSummary(m))
  r['pending migrations'] = await rowsRead(() => pendingMigrations(m))

  const counts = createRunCounts(m)
  await counts() // the process's one full count
  r['runs by status'] = await rowsRead(() => counts())
  const advancing = createRunCounts(m, { advanceEveryMs: 0 })
  await advancing()
  r['runs by status, marks moving'] = await rowsRead(() => advancing())

  // A whole first tick of a fresh runner: reclaim, materialise, missed, due,
  // start, log retention and heartbeat prune (both due on a first tick), heartbeat.
  const runner = new Runner({ db: m, registry, clock: { now: () => NOW }, instanceId: `idle-${size}` })
  r['idle tick'] = await rowsRead(() => runner.tick())
  r['second idle tick'] = await rowsRead(() => runner.tick())

  const { app, url } = await startApp()
  try {
    await get(`${url}/metrics`)
    await health(url)
    r['/metrics scrape'] = await rowsRead(() => get(`${url}/metrics`))
    r['/readyz'] = await rowsRead(() => get(`${url}/readyz`))
    r['health query'] = await rowsRead(() => health(url))
  } finally {
    await app.stop()
  }
}

beforeAll(async () => {
  defs = []
  for (let i = 0; i < 5; i++) {
    const fx = await makeDefinition(t.db, { schedule: '*/5 * * * *' })
    defs.push(fx)
  }
  // Materialised well past the horizon already: the check finds nothing to do.
  await t.db.run('UPDATE event_definitions SET materialized_through = ? + INTERVAL 2 DAY', [NOW])
  await addLive()
  await addHistory(1, 1000)
  await measureAll('small')
  await addHistory(1001, 200_000)
  await measureAll('large')
  await addAhead()
  await measureAll('ahead')
}, 240_000)

afterAll(() => {
  // The figures, for whoever reads the test log.
  console.table(Object.fromEntries(Object.keys(read.small).map((k) => [k, SIZES.map((s) => read[s][k])])))
})

describe('an idle instance reads the same rows on day 1 and day 1,000', () => {
  const kinds = [
    'runs: reclaim stale leases',
    'steps: reclaim stale leases',
    'materialisation check',
    'missed sweep',
    'lease due in-flight runs',
    'lock due key-less runs',
    'due keyed runs',
    'due runs of every kind',
    'log retention: oldest lines',
    'heartbeat',
    'heartbeat prune',
    'live runners',
    'degraded runs',
    'waiting steps',
    'pending migrations',
    'runs by status',
    'runs by status, marks moving',
    'idle tick',
    'second idle tick',
    '/metrics scrape',
    '/readyz',
    'health query',
  ]
  it.each(kinds)('%s: 200,000 finished runs read no more than 1,000 do', (kind) => {
    const small = read.small[kind] as number
    const large = read.large[kind] as number
    expect(large, `${kind}: ${large} rows at 200,000 finished runs, ${small} at 1,000`).toBeLessThanOrEqual(
      RATIO * Math.max(small, FLOOR),
    )
  })
  it.each(kinds)('%s: 50,000 runs scheduled ahead read no more than none do', (kind) => {
    const none = read.large[kind] as number
    const ahead = read.ahead[kind] as number
    expect(
      ahead,
      `${kind}: ${ahead} rows with 50,000 scheduled ahead, ${none} with none`,
    ).toBeLessThanOrEqual(RATIO * Math.max(none, FLOOR))
  })
  it('the sweeps still find their work: the missed sweep reads exactly the runs past their grace', async () => {
    // A run whose grace passed, among the 250,000: found, and marked by a tick.
    const f = defs[0] as DefinitionFixture
    const id = await runs.materialise(t.db, {
      definitionId: f.def.id,
      versionId: f.version.id,
      scope: 'late',
      scheduledFor: new Date(NOW.getTime() - 3600_000),
      timezone: 'UTC',
      concurrencyKey: 'late-key',
    })
    const found = await runs.findMissed(m, NOW, 500)
    expect(found.map((r) => r.id)).toEqual([id])
    const runner = new Runner({ db: m, registry, clock: { now: () => NOW } })
    await runner.tick()
    expect(await runs.statusOf(t.db, id as number)).toBe('missed')
    expect(await runs.findMissed(m, NOW, 500)).toEqual([])
  })
})
