/**
 * Burst: a top-of-the-hour show for 10,000 scopes (BENCH_BURST_RUNS), all due at
 * one instant: `core.log` → `core.wait {seconds: 1}` → `core.webhook` (POST to a
 * local sink) → `core.log`, on one instance of the real server (buildApp through
 * loadConfig, runner co-hosted, durable MariaDB as configured by default). The
 * runs come from schedules: 10 definitions × 1,000 scopes (the most scopes one
 * definition takes), each firing once at the instant.
 *
 * Figures: seconds from the instant to the last COMPLETED; p50/p99 of each run's
 * completion − (instant + 1 s), i.e. the lateness beyond the program's own wait;
 * statements per run (the server's pool, set-up included); webhook receipts,
 * which must be exactly one per run with no key seen twice.
 *
 * The peer (`burstPeer`), in the same process and round: graphile-worker 0.17.3 on
 * the local PostgreSQL doing the same work in its fastest configuration (local
 * queue, batch delays 0): job A logs and adds job B with runAt + 1 s; B posts
 * to the same sink with an Idempotency-Key and adds C; C logs. Ratio: their
 * seconds ÷ ours (≥ 1 means we are faster). Rounds in turn, medians.
 */
import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import pg from 'pg'
import {
  type BenchResult,
  benchDb,
  median,
  percentile,
  printResults,
  runMain,
  saveResult,
  sleep,
} from './lib.ts'
import { PEER_SERVER } from './peer.ts'
import {
  instantAhead,
  runTimes,
  scheduleAtInstant,
  serverStatements,
  startScheduledServer,
  waitAllTerminal,
} from './scheduled.ts'

const RUNS = Number(process.env.BENCH_BURST_RUNS ?? 10_000)
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3))
/** Time between creating the schedules and their instant: materialisation must be done by then. */
const LEAD_MS = Number(process.env.BENCH_LEAD_MS ?? 10_000)
/**
 * Settings the benchmark gives the server, all of them user-settable environment
 * variables (docs/performance.md), named in the results; none by default. A
 * burst of shows advances a batch at a time in set-wise rounds (about 0.2
 * statements per run), so the defaults are what it measures: on the loaded
 * 2-core machine RUNNER_PARALLELISM 32 with a 40-connection pool took 14.2 s
 * for 10,000 shows, the defaults 14.6 s. BENCH_BURST_SETTINGS (JSON) sets some.
 */
export const BURST_SETTINGS: Record<string, string> = JSON.parse(process.env.BENCH_BURST_SETTINGS ?? '{}')

export interface Sink {
  url: string
  /** Idempotency-Key of every request received, in order. */
  keys: string[]
  reset(): void
  close(): Promise<void>
}

/** A plain HTTP sink answering 200 to everything, recording each request's Idempotency-Key. */
export async function startSink(): Promise<Sink> {
  const keys: string[] = []
  const server: Server = createServer((req, res) => {
    keys.push(String(req.headers['idempotency-key'] ?? ''))
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 })
      res.end('ok')
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hook`,
    keys,
    reset: () => {
      keys.length = 0
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

export interface Receipts {
  received: number
  distinct: number
  duplicates: number
  missingKey: number
}

export function receipts(keys: readonly string[]): Receipts {
  const distinct = new Set(keys.filter((k) => k !== ''))
  return {
    received: keys.length,
    distinct: distinct.size,
    duplicates: keys.length - distinct.size - keys.filter((k) => k === '').length,
    missingKey: keys.filter((k) => k === '').length,
  }
}

function showProgram(sinkUrl: string) {
  return {
    phases: [
      {
        name: 'show',
        steps: [
          { kind: 'core.log', params: { message: 'doors open in {{run.scope}}' } },
          { kind: 'core.wait', params: { seconds: 1 } },
          { kind: 'core.webhook', params: { url: sinkUrl, method: 'POST', body: { room: '{{run.scope}}' } } },
          { kind: 'core.log', params: { message: 'wrap-up in {{run.scope}}' } },
        ],
      },
    ],
  }
}

export interface BurstMeasure {
  seconds: number
  p50LateMs: number
  p99LateMs: number
  statementsPerRun: number
  completed: number
  notCompleted: number
  receipts: Receipts
  startLagP99Ms: number
}

export async function measureOurs(sink: Sink, runs = RUNS): Promise<BurstMeasure> {
  const b = await benchDb(4)
  sink.reset()
  try {
    const server = await startScheduledServer(b.url, { WEBHOOK_ALLOW: sink.url, ...BURST_SETTINGS })
    try {
      const instant = instantAhead(LEAD_MS)
      const before = serverStatements(server)
      await scheduleAtInstant(server, b.db, { slug: 'burst', runs, instant, program: showProgram(sink.url) })
      await waitAllTerminal(b.db)
      const statements = serverStatements(server) - before
      const times = await runTimes(b.db)
      const due = instant.getTime() + 1000
      const late = times.ended.map((t) => t - due)
      return {
        seconds: (Math.max(...times.ended) - instant.getTime()) / 1000,
        p50LateMs: percentile(late, 50),
        p99LateMs: percentile(late, 99),
        statementsPerRun: statements / runs,
        completed: times.completed,
        notCompleted: times.notCompleted,
        receipts: receipts(sink.keys),
        startLagP99Ms: percentile(times.startLag, 99),
      }
    } finally {
      await server.stop()
    }
  } finally {
    await b.drop()
  }
}

async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: PEER_SERVER })
  await c.connect()
  try {
    return await fn(c)
  } finally {
    await c.end()
  }
}

/** The same show on graphile-worker: A (log, add B at +1 s) → B (POST, add C) → C (log). */
export async function measurePeer(sink: Sink, runs = RUNS): Promise<BurstMeasure> {
  const { Logger, run, runMigrations } = await import('graphile-worker')
  const name = `showrunner_peer_${randomBytes(4).toString('hex')}`
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`))
  sink.reset()
  const url = new URL(PEER_SERVER)
  url.pathname = `/${name}`
  const connectionString = url.toString()
  const logger = new Logger(() => (level, message) => {
    if (level === 'error') console.error(`graphile-worker: ${message}`)
  })
  try {
    await runMigrations({ connectionString, logger })
    const ended: number[] = []
    const runner = await run({
      connectionString,
      logger,
      noHandleSignals: true,
      concurrency: 24,
      maxPoolSize: 25,
      taskList: {
        a: async (payload, helpers) => {
          const { room } = payload as { room: string }
          helpers.logger.info(`doors open in ${room}`)
          await helpers.addJob('b', { room }, { runAt: new Date(Date.now() + 1000) })
        },
        b: async (payload, helpers) => {
          const { room } = payload as { room: string }
          const res = await fetch(sink.url, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': `burst:${room}:b` },
            body: JSON.stringify({ room }),
          })
          await res.arrayBuffer()
          if (!res.ok) throw new Error(`sink answered ${res.status}`)
          await helpers.addJob('c', { room })
        },
        c: async (payload, helpers) => {
          helpers.logger.info(`wrap-up in ${(payload as { room: string }).room}`)
        },
      },
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    })
    runner.events.on('job:complete', ({ job }) => {
      if (job.task_identifier === 'c') ended.push(Date.now())
    })
    const probe = new pg.Client({ connectionString })
    await probe.connect()
    try {
      const instant = instantAhead(Math.min(LEAD_MS, 5000))
      const { makeWorkerUtils } = await import('graphile-worker')
      const utils = await makeWorkerUtils({ connectionString, logger })
      try {
        // One add_jobs call: every A due at the instant.
        await utils.addJobs(
          Array.from({ length: runs }, (_, i) => ({
            identifier: 'a',
            payload: { room: `room-${i}` },
            runAt: instant,
          })),
        )
      } finally {
        await utils.release()
      }
      const deadline = Date.now() + 300_000
      while (ended.length < runs && Date.now() < deadline) await sleep(20)
      // Then until the completions are committed (the queue is empty).
      for (;;) {
        const { rows } = await probe.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs')
        if (rows[0].n === 0) break
        if (Date.now() > deadline)
          throw new Error(`graphile-worker did not finish ${runs} shows within 5 minutes`)
        await sleep(2)
      }
      const last = Date.now()
      const due = instant.getTime() + 1000
      const late = ended.map((t) => t - due)
      return {
        seconds: (last - instant.getTime()) / 1000,
        p50LateMs: percentile(late, 50),
        p99LateMs: percentile(late, 99),
        statementsPerRun: Number.NaN,
        completed: ended.length,
        notCompleted: runs - ended.length,
        receipts: receipts(sink.keys),
        startLagP99Ms: Number.NaN,
      }
    } finally {
      await probe.end()
      await runner.stop()
      // stop() can answer before the pool has closed its last connections: let
      // them go before the database is dropped under them.
      await runner.promise.catch(() => {})
      await sleep(500)
    }
  } finally {
    await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  }
}

function checkReceipts(who: string, r: Receipts, runs: number): void {
  if (r.received !== runs || r.distinct !== runs || r.duplicates !== 0 || r.missingKey !== 0)
    throw new Error(
      `${who}: the sink saw ${r.received} requests, ${r.distinct} distinct keys, ${r.duplicates} duplicates, ` +
        `${r.missingKey} without a key; expected exactly ${runs} distinct keys`,
    )
}

const round1 = (n: number) => Math.round(n * 10) / 10

export async function run(): Promise<Record<string, BenchResult>> {
  const sink = await startSink()
  try {
    const ours: BurstMeasure[] = []
    const theirs: BurstMeasure[] = []
    for (let round = 1; round <= ROUNDS; round++) {
      const one = await measureOurs(sink)
      console.log(`burst: round ${round}: ours ${one.seconds.toFixed(2)} s`)
      checkReceipts('burst', one.receipts, RUNS)
      const peer = await measurePeer(sink)
      checkReceipts('burstPeer', peer.receipts, RUNS)
      ours.push(one)
      theirs.push(peer)
      console.log(
        `burst: round ${round}: ours ${one.seconds.toFixed(2)} s (late p50 ${one.p50LateMs} ms, p99 ${one.p99LateMs} ms, ` +
          `${one.statementsPerRun.toFixed(2)} statements/run, start lag p99 ${one.startLagP99Ms} ms) | ` +
          `graphile-worker ${peer.seconds.toFixed(2)} s (late p50 ${peer.p50LateMs} ms, p99 ${peer.p99LateMs} ms)`,
      )
    }
    const oursSeconds = median(ours.map((m) => m.seconds))
    const theirsSeconds = median(theirs.map((m) => m.seconds))
    const pick = (ms: BurstMeasure[], s: number) =>
      ms.reduce((a, b) => (Math.abs(b.seconds - s) < Math.abs(a.seconds - s) ? b : a))
    const one = pick(ours, oursSeconds)
    const peer = pick(theirs, theirsSeconds)
    const failed = ours.reduce((n, m) => n + m.notCompleted, 0)
    const ratio = theirsSeconds / oursSeconds
    const settings = Object.keys(BURST_SETTINGS).length > 0 ? BURST_SETTINGS : 'defaults'
    const results: Record<string, BenchResult> = {
      burst: {
        value: round1(oursSeconds * 100) / 100,
        unit: 's (instant to last COMPLETED)',
        baseline: null,
        ratio: null,
        target: 'every run completed; exactly one webhook per run, no duplicate key',
        met: failed === 0,
        detail: {
          runs: RUNS,
          program: 'core.log → core.wait 1 s → core.webhook (local sink) → core.log',
          source: `${Math.ceil(RUNS / 1000)} definitions × up to 1,000 scopes, one schedule instant`,
          settings,
          rounds: ROUNDS,
          roundsSeconds: ours.map((m) => m.seconds),
          lateP50Ms: one.p50LateMs,
          lateP99Ms: one.p99LateMs,
          lateMeaning: 'completion − (instant + 1 s)',
          startLagP99Ms: one.startLagP99Ms,
          statementsPerRun: round1(one.statementsPerRun * 100) / 100,
          receipts: one.receipts,
          failed,
        },
      },
      burstPeer: {
        value: ratio,
        unit: 'x (graphile-worker seconds ÷ ours)',
        baseline: theirsSeconds,
        ratio,
        target: '>= 1.0x: graphile-worker 0.17.3 (concurrency 24, pool 25, localQueue 500, batch delays 0)',
        met: ratio >= 1,
        detail: {
          oursSeconds,
          theirsSeconds,
          roundsTheirsSeconds: theirs.map((m) => m.seconds),
          theirsLateP50Ms: peer.p50LateMs,
          theirsLateP99Ms: peer.p99LateMs,
          theirsReceipts: peer.receipts,
          work: 'A logs, adds B at +1 s; B POSTs to the sink (Idempotency-Key), adds C; C logs',
        },
      },
    }
    for (const [name, r] of Object.entries(results)) await saveResult(name, r)
    return results
  } finally {
    await sink.close()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
