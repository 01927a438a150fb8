/**
 * Notifications out: the three budgets of the outbox, each on the real server
 * (buildApp through loadConfig, runner and dispatcher co-hosted, default
 * NOTIFY_POLL_MS) with a WEBHOOK channel on CUE_WAITING pointed at a real
 * receiver on loopback (bench/notifyReceiver.ts: counts by webhook-id,
 * verifies every signature).
 *
 *  1. notifyLatency: cues opening one at a time on an idle instance
 *     (NOTIFY_BENCH_EVENTS, default 50, `startRun` each, the next after the
 *     last arrived and a pause); per cue, the receiver's arrival time minus its
 *     notification_events row's occurred_at (the instant the cue opened, same
 *     machine clock). Target: p99 ≤ 1 s.
 *  2. notifyBurst: NOTIFY_BENCH_CUES (2,000) cues opening at one instant, from
 *     schedules (2 definitions × 1,000 scopes), on three instances over one
 *     database (three buildApp instances in this process, each with its own
 *     pools, runner and dispatcher). Figure: the instant to the last first
 *     arrival. Target: every event delivered within 10 s, none twice, every
 *     signature valid. Beside it: the idle p99 (the result's baseline), the
 *     p50/p99 of cue opened → arrival, and when each event reached the outbox
 *     (its delivery row's created_at), which tells the runner's share from the
 *     dispatchers'.
 *  3. notifyIdle: what an idle instance costs its database with no
 *     notifications and with NOTIFY_BENCH_HISTORY (100,000) delivered ones
 *     (SQL inserts, one every 20 s back from now: inside the 30-day retention,
 *     so retention has nothing to take), the same instance before and after
 *     seeding, on a private
 *     MariaDB of its own so the global counters are this instance's alone:
 *     Handler_read_*, Innodb_rows_read and Questions deltas over
 *     NOTIFY_BENCH_IDLE_SECONDS (60: one outbox-retention pass in each
 *     window), scaled to a minute. Target: with history no more than without,
 *     give or take a window's edge: ≤ 1.1 × or + 100 a minute, whichever is larger.
 *
 * Every wait is bounded in time and every request loop in count.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDb, type Db } from '../sql/db.ts'
import { migrate } from '../sql/migrate.ts'
import { startPrivateMariadb } from '../src/privateMariadb.ts'
import {
  type BenchResult,
  benchDb,
  cpuMeter,
  percentile,
  printResults,
  runMain,
  saveResult,
  sleep,
} from './lib.ts'
import { type NotifyReceiver, startNotifyReceiver } from './notifyReceiver.ts'
import { graphql, instantAhead, scheduleAtInstant, startScheduledServer } from './scheduled.ts'
import type { BenchServer } from './server.ts'

const EVENTS = Number(process.env.NOTIFY_BENCH_EVENTS ?? 50)
const CUES = Number(process.env.NOTIFY_BENCH_CUES ?? 2000)
const HISTORY = Number(process.env.NOTIFY_BENCH_HISTORY ?? 100_000)
const IDLE_SECONDS = Number(process.env.NOTIFY_BENCH_IDLE_SECONDS ?? 60)
/** Which parts to run (comma-separated: latency, burst, idle), for a quick look at one. */
const PARTS = new Set(
  (process.env.NOTIFY_BENCH_PARTS ?? 'latency,burst,idle').split(',').map((p) => p.trim()),
)
const LEAD_MS = Number(process.env.BENCH_LEAD_MS ?? 10_000)
/** The burst's budget, and how long after it the benchmark still waits for stragglers. */
const BURST_BUDGET_MS = 10_000
const BURST_GIVE_UP_MS = 60_000
/** After the last expected arrival: time for a duplicate to show up. */
const SETTLE_MS = 3000

const SECRET = `whsec_${Buffer.from('showrunner-bench-notify-signing-key').toString('base64')}`
process.env.SHOWRUNNER_SECRET_NOTIFY_BENCH_KEY = SECRET
const nodeFlags = process.execArgv
  .filter((a, i, all) => a !== '--import' && all[i - 1] !== '--import')
  .join(' ')

const CUE_SHOW = {
  phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Ready in {{run.scope}}?' } }] }],
}

async function createCueChannel(server: BenchServer, rx: NotifyReceiver, events: string[]): Promise<void> {
  await graphql(
    server.graphqlUrl,
    'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
    {
      input: {
        name: 'bench-cues',
        kind: 'WEBHOOK',
        target: `${rx.url}/cues`,
        events,
        signingSecret: '{{secret.NOTIFY_BENCH_KEY}}',
      },
    },
  )
}

/** Each event's occurred_at (ms) by its public id (the webhook-id). */
async function eventTimes(db: Db): Promise<Map<string, number>> {
  const rows = await db.query<{ event_id: string; occurred_at: Date }>(
    `SELECT event_id, occurred_at FROM notification_events WHERE type = 'CUE_WAITING'`,
  )
  return new Map(rows.map((r) => [r.event_id, r.occurred_at.getTime()]))
}

/** Arrival − occurred_at of every event the receiver has seen. */
function latencies(events: Map<string, number>, rx: NotifyReceiver): number[] {
  const out: number[] = []
  for (const [id, at] of events) {
    const arrived = rx.firstArrival.get(id)
    if (arrived !== undefined) out.push(arrived - at)
  }
  return out
}

async function waitFor(what: string, ok: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!(await ok())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(20)
  }
}

async function idleLatency(rx: NotifyReceiver): Promise<BenchResult> {
  const b = await benchDb(4)
  const server = await startScheduledServer(b.url, { WEBHOOK_ALLOW: `${rx.url}/` })
  try {
    await createCueChannel(server, rx, ['CUE_WAITING'])
    const def = await graphql<{ createDefinition: { id: string } }>(
      server.graphqlUrl,
      'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
      { input: { slug: 'one-cue', title: 'One cue', program: CUE_SHOW } },
    )
    await sleep(2000) // past the instance's first passes
    for (let i = 0; i < EVENTS; i++) {
      await graphql(
        server.graphqlUrl,
        'mutation ($d: ID!, $s: String) { startRun(definitionId: $d, scope: $s) { id } }',
        {
          d: def.createDefinition.id,
          s: `room-${i}`,
        },
      )
      await waitFor(`delivery ${i + 1} of ${EVENTS}`, () => rx.firstArrival.size > i, 10_000)
      // A pause of 100–400 ms, so the cues do not fall at one phase of the poll.
      await sleep(100 + Math.random() * 300)
    }
    await sleep(SETTLE_MS)
    const lags = latencies(await eventTimes(b.db), rx)
    const p99 = percentile(lags, 99)
    const r: BenchResult = {
      value: p99,
      unit: 'ms (p99 cue opened → first delivery attempt arrives, idle)',
      baseline: null,
      ratio: null,
      target: 'p99 <= 1000 ms',
      met: p99 <= 1000 && lags.length === EVENTS && rx.duplicates() === 0 && rx.badSignatures === 0,
      detail: {
        events: EVENTS,
        delivered: lags.length,
        p50Ms: percentile(lags, 50),
        p99Ms: p99,
        maxMs: Math.max(...lags),
        duplicates: rx.duplicates(),
        badSignatures: rx.badSignatures,
        settings: { WEBHOOK_ALLOW: 'the receiver', NOTIFY_POLL_MS: 'default (500)' },
        nodeFlags,
      },
    }
    console.log(`notifyLatency: ${JSON.stringify(r.detail)}`)
    return r
  } finally {
    await server.stop()
    await b.drop()
  }
}

async function burst(rx: NotifyReceiver, idleP99: number | null): Promise<BenchResult> {
  const b = await benchDb(4)
  const env = { WEBHOOK_ALLOW: `${rx.url}/` }
  const servers: BenchServer[] = []
  try {
    for (const name of ['a', 'b', 'c'])
      servers.push(await startScheduledServer(b.url, { ...env, INSTANCE_ID: `bench-notify-${name}` }))
    const first = servers[0] as BenchServer
    await createCueChannel(first, rx, ['CUE_WAITING'])
    const instant = instantAhead(LEAD_MS)
    await scheduleAtInstant(first, b.db, { slug: 'burst', runs: CUES, instant, program: CUE_SHOW })
    rx.reset()
    // Statements the three instances send (API and runner pools): per cue, a
    // figure that load does not move.
    const statements = () => servers.reduce((sum, s) => sum + instanceStatements(s), 0)
    await sleep(Math.max(0, instant.getTime() - Date.now()))
    const statementsBefore = statements()
    const cpu = cpuMeter('mariadbd')
    await waitFor(
      `${CUES} deliveries`,
      () => rx.firstArrival.size >= CUES,
      instant.getTime() + BURST_GIVE_UP_MS - Date.now(),
    ).catch((err) => console.error(`notifyBurst: ${(err as Error).message}`))
    const cpuPerDelivery = cpu.perUnit(Math.max(1, rx.firstArrival.size))
    const statementsPerCue = Math.round(((statements() - statementsBefore) / CUES) * 100) / 100
    await sleep(SETTLE_MS)
    const events = await eventTimes(b.db)
    const arrivals = [...rx.firstArrival.values()]
    const lastMs = arrivals.length > 0 ? Math.max(...arrivals) - instant.getTime() : Number.NaN
    const lags = latencies(events, rx)
    // Where the time goes: the cues opening (the runner) or their sending (the dispatchers).
    const opened = [...events.values()]
    const lastOpenedMs = opened.length > 0 ? Math.max(...opened) - instant.getTime() : Number.NaN
    // When each event reached the outbox (its delivery row committed): the cue
    // opens at occurred_at, and the runner writes the event when it opens the
    // cue's ladder, which under a burst can be later.
    const written = await b.db.query<{ event_id: string; created_at: Date }>(
      `SELECT e.event_id, d.created_at FROM notification_deliveries d
         JOIN notification_events e ON e.id = d.event_row_id`,
    )
    const writtenAt = new Map(written.map((r) => [r.event_id, r.created_at.getTime()]))
    const lastWrittenMs = Math.max(...writtenAt.values()) - instant.getTime()
    const outboxLags = latencies(writtenAt, rx)
    const [pending] = await b.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM notification_deliveries WHERE status <> 'DELIVERED'`,
    )
    const [retried] = await b.db.query<{ n: number }>(
      'SELECT COUNT(*) AS n FROM notification_deliveries WHERE attempts <> 1',
    )
    const delivered = lags.length
    const r: BenchResult = {
      value: lastMs,
      unit: `ms (instant → last of ${CUES} deliveries, 3 instances)`,
      baseline: idleP99,
      ratio: null,
      target: `every delivery within ${BURST_BUDGET_MS} ms, 0 duplicates, all signatures valid`,
      met:
        lastMs <= BURST_BUDGET_MS &&
        events.size === CUES &&
        delivered === CUES &&
        rx.duplicates() === 0 &&
        rx.badSignatures === 0,
      detail: {
        cues: CUES,
        instances: 3,
        events: events.size,
        delivered,
        requests: rx.requests,
        duplicates: rx.duplicates(),
        badSignatures: rx.badSignatures,
        notDelivered: Number(pending?.n),
        deliveriesWithRetries: Number(retried?.n),
        lastCueOpenedMs: lastOpenedMs,
        lastWrittenToOutboxMs: lastWrittenMs,
        outboxToArrivalP50Ms: percentile(outboxLags, 50),
        outboxToArrivalP99Ms: percentile(outboxLags, 99),
        firstArrivalMs: arrivals.length > 0 ? Math.min(...arrivals) - instant.getTime() : null,
        lagP50Ms: percentile(lags, 50),
        lagP99Ms: percentile(lags, 99),
        cpuUsPerDelivery: cpuPerDelivery,
        statementsPerCue,
        statementsAre: 'sent by the 3 instances from the instant to the last first arrival, per cue',
        baselineIs: 'the idle p99 of notifyLatency (ms)',
        settings: { WEBHOOK_ALLOW: 'the receiver', INSTANCE_ID: 'bench-notify-{a,b,c}' },
        nodeFlags,
      },
    }
    console.log(`notifyBurst: last delivery ${lastMs} ms after the instant; ${JSON.stringify(r.detail)}`)
    return r
  } finally {
    await Promise.allSettled(servers.map((s) => s.stop()))
    await b.drop()
  }
}

/** Statements an instance sent since it started (its API pool and its runner's, when separate). */
function instanceStatements(server: BenchServer): number {
  const { db, runnerDb } = server.app
  return db.stats.statements + (runnerDb && runnerDb !== db ? runnerDb.stats.statements : 0)
}

interface IdleFigures {
  handlerReadPerMinute: number
  innodbRowsReadPerMinute: number
  questionsPerMinute: number
  instanceStatementsPerMinute: number
}

/** 100,000 delivered notifications, one every 20 s back from now (23 days: inside the 30-day retention). */
async function seedHistory(db: Db, channelId: number): Promise<void> {
  await db.runQuery(
    `INSERT INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     SELECT CONCAT('evt_seed', LPAD(seq, 24, '0')), 'CUE_WAITING', seq, seq, CONCAT('seed:', seq),
            JSON_OBJECT('type', 'cue.waiting', 'cue', JSON_OBJECT('prompt', 'Ready?')),
            NOW(3) - INTERVAL seq * 20 SECOND
       FROM seq_1_to_${HISTORY}`,
  )
  await db.runQuery(
    `INSERT INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, attempts, created_at, delivered_at, give_up_at)
     SELECT id, ?, run_id, 'DELIVERED', 1, occurred_at, occurred_at + INTERVAL 0.2 SECOND,
            occurred_at + INTERVAL 24 HOUR
       FROM notification_events WHERE dedupe_key LIKE 'seed:%'`,
    [channelId],
  )
  await db.runQuery('ANALYZE TABLE notification_events, notification_deliveries')
}

async function idleCost(rx: NotifyReceiver): Promise<BenchResult> {
  const dir = await mkdtemp(join(tmpdir(), 'sr-notify-'))
  const mariadb = await startPrivateMariadb({ dir, database: 'showrunner' })
  try {
    const admin = createDb(mariadb.url, { connectionLimit: 1 })
    const status = async (like: string) => {
      const rows = await admin.query<{ Value: string }>(`SHOW GLOBAL STATUS LIKE '${like}'`)
      return rows.reduce((sum, r) => sum + Number(r.Value), 0)
    }
    await migrate(admin)
    const server = await startScheduledServer(mariadb.url, { WEBHOOK_ALLOW: `${rx.url}/` })
    const statements = () => instanceStatements(server)
    try {
      // Every event an idle pass looks at: the late-start sweep runs only while a channel listens.
      await createCueChannel(server, rx, ['CUE_WAITING', 'RUN_LATE_START', 'RUN_COMPLETED', 'RUN_FAILED'])
      const window = async (): Promise<IdleFigures> => {
        // Let InnoDB write back what was just written, so the window measures the instance.
        await admin.run('SET GLOBAL innodb_max_dirty_pages_pct = 0')
        const settleBy = Date.now() + 120_000
        while ((await status('Innodb_buffer_pool_pages_dirty')) > 50 && Date.now() < settleBy)
          await sleep(1000)
        await admin.run('SET GLOBAL innodb_max_dirty_pages_pct = 90')
        await sleep(2000)
        const read = async () => ({
          handler: await status('Handler_read%'),
          innodb: await status('Innodb_rows_read'),
          questions: await status('Questions'),
          statements: statements(),
        })
        const from = await read()
        await sleep(IDLE_SECONDS * 1000)
        const to = await read()
        const perMinute = (n: number) => Math.round((n * 60) / IDLE_SECONDS)
        return {
          handlerReadPerMinute: perMinute(to.handler - from.handler),
          innodbRowsReadPerMinute: perMinute(to.innodb - from.innodb),
          questionsPerMinute: perMinute(to.questions - from.questions),
          instanceStatementsPerMinute: perMinute(to.statements - from.statements),
        }
      }
      const none = await window()
      console.log(`notifyIdle: no notifications: ${JSON.stringify(none)}`)
      const [channel] = await admin.query<{ id: number }>('SELECT id FROM notification_channels')
      const t0 = Date.now()
      await seedHistory(admin, Number(channel?.id))
      const seedSeconds = Math.round((Date.now() - t0) / 100) / 10
      const [count] = await admin.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM notification_deliveries WHERE status = 'DELIVERED'`,
      )
      const full = await window()
      console.log(`notifyIdle: ${count?.n} delivered: ${JSON.stringify(full)}`)
      const within = (a: number, b: number) => a <= Math.max(1.1 * b, b + 100)
      const ratio = full.handlerReadPerMinute / Math.max(1, none.handlerReadPerMinute)
      return {
        value: full.handlerReadPerMinute,
        unit: `rows read per idle minute (Handler_read_*) with ${HISTORY} delivered notifications`,
        baseline: none.handlerReadPerMinute,
        ratio: Math.round(ratio * 100) / 100,
        target: 'no more than with none (≤ 1.1 × or + 100 rows a minute)',
        met:
          Number(count?.n) === HISTORY &&
          within(full.handlerReadPerMinute, none.handlerReadPerMinute) &&
          within(full.innodbRowsReadPerMinute, none.innodbRowsReadPerMinute) &&
          within(full.questionsPerMinute, none.questionsPerMinute),
        detail: {
          history: HISTORY,
          idleSeconds: IDLE_SECONDS,
          scaledToMinute: true,
          seedSeconds,
          none,
          withHistory: full,
          database: 'a private MariaDB of this benchmark (global counters are this instance’s)',
          settings: 'defaults (NOTIFICATION_RETENTION_DAYS 30, NOTIFY_POLL_MS 500, TICK_MS 1000)',
          nodeFlags,
        },
      }
    } finally {
      await server.stop()
      await admin.close()
    }
  } finally {
    await mariadb.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

export async function run(): Promise<Record<string, BenchResult>> {
  const rx = await startNotifyReceiver(SECRET)
  try {
    const results: Record<string, BenchResult> = {}
    if (PARTS.has('latency')) {
      results.notifyLatency = await idleLatency(rx)
      await saveResult('notifyLatency', results.notifyLatency)
      rx.reset()
    }
    if (PARTS.has('burst')) {
      results.notifyBurst = await burst(rx, results.notifyLatency?.value ?? null)
      await saveResult('notifyBurst', results.notifyBurst)
      rx.reset()
    }
    if (PARTS.has('idle')) {
      results.notifyIdle = await idleCost(rx)
      await saveResult('notifyIdle', results.notifyIdle)
    }
    return results
  } finally {
    await rx.close()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
