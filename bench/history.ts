/**
 * History: what an idle instance costs its database on day 1 and on day 1,000.
 *
 * The product as a user runs it: `buildApp` (the `npm start` code path) with
 * its defaults (runner co-hosted, TICK_MS 1000, pool of 10), on a private
 * MariaDB of its own (the one `npm start` starts without DATABASE_URL), so the
 * server's CPU is this instance's alone. Two databases, in the same run: an
 * empty one, and one holding 1,000,000 finished runs and 100,000 scheduled
 * ahead (bench/historyData.ts). Nothing is due and nobody calls the API.
 *
 * Figures per size: MariaDB CPU (utime + stime of mariadbd, from /proc) and
 * rows read (global Handler_read_* deltas; the server serves nothing else) over
 * BENCH_IDLE_WINDOWS (default 3) back-to-back idle windows of
 * BENCH_IDLE_SECONDS (default 60 s) each, scaled to a minute; the figure is the
 * median window, the others printed beside it (a lone burst of background work
 * in one window, seen in single-window runs, no longer decides the ratio);
 * then the p50 and p99 of `health`, `runs(limit: 100)` and a `/metrics` scrape,
 * each called BENCH_CALLS times (default 200), the three in turn. Target: idle CPU per minute
 * at 1,000,000 runs ≤ 1.5 × that of the empty database.
 *
 * Before the window, each instance is warmed (its first tick, its first
 * run-count, which counts the table once) and the database is let settle: its
 * dirty pages flushed after the bulk insert and its purge caught up (history
 * list short), so the windows measure the instance's statements, not InnoDB
 * writing back or purging the fixture. Pages written in each window are
 * printed, to show whether background writing remained.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDb } from '../sql/db.ts'
import { migrate } from '../sql/migrate.ts'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { startPrivateMariadb } from '../src/privateMariadb.ts'
import { buildApp } from '../src/server.ts'
import { fillHistory, type HistoryShape } from './historyData.ts'
import {
  type BenchResult,
  percentile,
  printResults,
  processCpuMs,
  runMain,
  saveResult,
  sleep,
} from './lib.ts'

/**
 * mariadbd's CPU is read from /proc in 10 ms clock ticks, so each window's
 * figure is off by up to two ticks: ±20 ms, which over 20 s was ±60 ms per
 * minute against an idle cost of 240–360. Over 60 s it is ±20 ms per minute.
 */
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60)
const IDLE_WINDOWS = Math.max(1, Math.floor(Number(process.env.BENCH_IDLE_WINDOWS ?? 3)))
/** Undo records left to purge under which the database counts as settled. */
const SETTLED_HISTORY_LENGTH = 100
const CALLS = Math.max(10, Number(process.env.BENCH_CALLS ?? 200))
const TOKEN = 'history-viewer-token-0123456789'

/** Finished runs of the large size (BENCH_HISTORY_RUNS, for a quick try); a tenth as many wait ahead. */
const FINISHED = Math.max(1000, Number(process.env.BENCH_HISTORY_RUNS ?? 1_000_000))

const SIZES: { name: string; shape: HistoryShape }[] = [
  { name: 'empty', shape: { finished: 0, ahead: 0 } },
  { name: 'history', shape: { finished: FINISHED, ahead: Math.floor(FINISHED / 10) } },
]

const HEALTH = '{ health { ok runsByStatus degradedRuns waitingSteps oldestWaitingStepAt runners { id } } }'
const RUNS = '{ runs(limit: 100) { id status scheduledFor definition { slug } } }'

/** One idle window, scaled to a minute. */
interface IdleWindow {
  cpuMsPerMinute: number
  rowsReadPerMinute: number
  pagesWritten: number
  ticks: number
}

interface SizeFigures {
  fillSeconds: number
  /** The median window's. */
  idleCpuMsPerMinute: number
  idleRowsReadPerMinute: number
  ticksInWindow: number
  /** Each window in order: CPU and rows read per minute, pages written, ticks. */
  windows: IdleWindow[]
  /** Undo records InnoDB had still to purge when the windows began. */
  historyLengthAtStart: number
  p50Ms: { health: number; runs100: number; metrics: number }
  p99Ms: { health: number; runs100: number; metrics: number }
}

async function timed(fn: () => Promise<void>): Promise<number> {
  const t0 = performance.now()
  await fn()
  return performance.now() - t0
}

async function measure(shape: HistoryShape): Promise<SizeFigures> {
  const dir = await mkdtemp(join(tmpdir(), 'sr-hist-'))
  const server = await startPrivateMariadb({ dir, database: 'showrunner' })
  try {
    const admin = createDb(server.url, { connectionLimit: 2 })
    const status = async (like: string) => {
      const rows = await admin.query<{ Value: string }>(`SHOW GLOBAL STATUS LIKE '${like}'`)
      return rows.reduce((sum, r) => sum + Number(r.Value), 0)
    }
    await migrate(admin)
    const t0 = Date.now()
    await fillHistory(admin, shape)
    const fillSeconds = (Date.now() - t0) / 1000

    const config = loadConfig({
      DATABASE_URL: server.url,
      PORT: '0',
      HOST: '127.0.0.1',
      SHOWRUNNER_TOKENS: `viewer:${TOKEN}`,
      LOG_LEVEL: 'silent',
    })
    const app = buildApp(config, { logger: silentLogger() })
    const { url } = await app.start()
    const gql = async (query: string) => {
      const res = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ query }),
      })
      const body = (await res.json()) as { errors?: unknown }
      if (res.status !== 200 || body.errors) throw new Error(`HTTP ${res.status}: ${JSON.stringify(body)}`)
    }
    const scrape = async () => {
      const res = await fetch(`${url}/metrics`)
      await res.text()
      if (res.status !== 200) throw new Error(`/metrics: HTTP ${res.status}`)
    }
    try {
      // Warm: the first tick (materialisation check, retention, heartbeat
      // prune) and the first run-count (one count of the whole table).
      await gql(HEALTH)
      await scrape()
      await gql(RUNS)
      // Let InnoDB write back the fixture before the window.
      await admin.run('SET GLOBAL innodb_max_dirty_pages_pct = 0')
      const settleBy = Date.now() + 180_000
      while ((await status('Innodb_buffer_pool_pages_dirty')) > 50 && Date.now() < settleBy) await sleep(1000)
      await admin.run('SET GLOBAL innodb_max_dirty_pages_pct = 90')
      // And purge caught up: undo left by the fill is background work an idle window would count.
      while ((await status('Innodb_history_list_length')) > SETTLED_HISTORY_LENGTH && Date.now() < settleBy) {
        await sleep(1000)
      }
      const historyLengthAtStart = await status('Innodb_history_list_length')
      await sleep(3000)

      const perMinute = 60 / IDLE_SECONDS
      const windows: IdleWindow[] = []
      for (let w = 0; w < IDLE_WINDOWS; w++) {
        // The heartbeat is one INSERT … ON DUPLICATE KEY UPDATE per tick.
        const insertsBefore = await status('Com_insert')
        const pagesBefore = await status('Innodb_pages_written')
        const cpu0 = processCpuMs(server.pid)
        const rows0 = await status('Handler_read%')
        await sleep(IDLE_SECONDS * 1000)
        const cpu1 = processCpuMs(server.pid)
        const rows1 = await status('Handler_read%')
        windows.push({
          cpuMsPerMinute: Math.round((cpu1 - cpu0) * perMinute),
          rowsReadPerMinute: Math.round((rows1 - rows0) * perMinute),
          pagesWritten: (await status('Innodb_pages_written')) - pagesBefore,
          ticks: (await status('Com_insert')) - insertsBefore,
        })
      }
      const median = [...windows].sort((a, b) => a.cpuMsPerMinute - b.cpuMsPerMinute)[
        Math.floor((windows.length - 1) / 2)
      ] as IdleWindow

      const round = (n: number) => Math.round(n * 100) / 100
      const latency: Record<string, number[]> = { health: [], runs100: [], metrics: [] }
      const calls: Record<string, () => Promise<void>> = {
        health: () => gql(HEALTH),
        runs100: () => gql(RUNS),
        metrics: scrape,
      }
      // In turn, call by call, so a burst of load on a shared machine lands on all three alike.
      for (let i = 0; i < CALLS; i++) {
        for (const [name, fn] of Object.entries(calls)) latency[name]?.push(await timed(fn))
      }
      const at = (p: number) =>
        Object.fromEntries(Object.entries(latency).map(([k, ms]) => [k, round(percentile(ms, p))]))
      const p99Ms = at(99) as SizeFigures['p99Ms']
      const p50Ms = at(50) as SizeFigures['p99Ms']
      return {
        fillSeconds: Math.round(fillSeconds),
        idleCpuMsPerMinute: median.cpuMsPerMinute,
        idleRowsReadPerMinute: median.rowsReadPerMinute,
        ticksInWindow: median.ticks,
        windows,
        historyLengthAtStart,
        p50Ms,
        p99Ms,
      }
    } finally {
      await app.stop()
      await admin.close()
    }
  } finally {
    await server.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  const figures: Record<string, SizeFigures> = {}
  for (const { name, shape } of SIZES) {
    console.log(
      `history: ${name}: filling and measuring (${IDLE_WINDOWS} idle windows of ${IDLE_SECONDS} s, ${CALLS} calls each)…`,
    )
    figures[name] = await measure(shape)
    console.log(`history: ${name}:`, JSON.stringify(figures[name]))
  }
  const [empty, full] = SIZES.map((s) => figures[s.name] as SizeFigures) as [SizeFigures, SizeFigures]
  // A floor of 1 ms: an empty instance can round to nothing in a short window.
  const ratio = full.idleCpuMsPerMinute / Math.max(1, empty.idleCpuMsPerMinute)
  const result: BenchResult = {
    value: full.idleCpuMsPerMinute,
    unit: `ms MariaDB CPU per idle minute at ${FINISHED} finished runs`,
    baseline: empty.idleCpuMsPerMinute,
    ratio: Math.round(ratio * 100) / 100,
    target: '≤ 1.5 × the empty database',
    met: ratio <= 1.5,
    detail: {
      idleSeconds: IDLE_SECONDS,
      idleWindows: IDLE_WINDOWS,
      scaledToMinute: true,
      calls: CALLS,
      ...figures,
    },
  }
  await saveResult('history', result)
  printResults({ history: result })
}

runMain(import.meta.url, main)
