/**
 * Shared bench plumbing: a throwaway database, the machine baseline, timing and
 * the results file. Benchmarks never run inside `npm test`.
 */
import { randomBytes } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { readFile, writeFile } from 'node:fs/promises'
import mysql from 'mysql2/promise'
import { createDb, type Db } from '../sql/db.ts'
import { migrate } from '../sql/migrate.ts'

export const BENCH_SERVER =
  process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306'

export interface BenchDb {
  db: Db
  url: string
  open(connectionLimit?: number): Db
  drop(): Promise<void>
}

/** Bench databases this process made and has not dropped yet. */
const liveDatabases = new Set<string>()

async function dropDatabase(name: string): Promise<void> {
  const c = await mysql.createConnection({ uri: BENCH_SERVER, connectTimeout: 5000 })
  try {
    await c.query(`DROP DATABASE IF EXISTS \`${name}\``)
  } finally {
    await c.end()
  }
  liveDatabases.delete(name)
}

/**
 * An interrupted benchmark (Ctrl-C, a CI timeout) skips every `finally`: drop
 * what it made before exiting, so no showrunner_bench_* database is left behind
 * on a shared server.
 */
function dropOnSignals(): void {
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    if (process.listenerCount(signal) > 0) continue
    process.once(signal, () => {
      const names = [...liveDatabases]
      console.error(`bench: ${signal}, dropping ${names.length} bench database(s) before exiting`)
      Promise.allSettled(names.map(dropDatabase)).then((results) => {
        for (const r of results)
          if (r.status === 'rejected') console.error('bench: could not drop:', r.reason)
        process.exit(code)
      })
    })
  }
}

/** A fresh, migrated database for one benchmark. */
export async function benchDb(connectionLimit = 20): Promise<BenchDb> {
  const name = `showrunner_bench_${randomBytes(4).toString('hex')}`
  dropOnSignals()
  const admin = await mysql.createConnection({ uri: BENCH_SERVER })
  await admin.query(`CREATE DATABASE \`${name}\``)
  liveDatabases.add(name)
  await admin.end()
  const url = new URL(BENCH_SERVER)
  url.pathname = `/${name}`
  const pools: Db[] = []
  const open = (limit = connectionLimit) => {
    const d = createDb(url.toString(), { connectionLimit: limit })
    pools.push(d)
    return d
  }
  const db = open()
  await migrate(db)
  return {
    db,
    url: url.toString(),
    open,
    async drop() {
      await Promise.allSettled(pools.map((p) => p.close()))
      await dropDatabase(name)
    },
  }
}

/**
 * The machine's baseline: durable single-row UPDATEs per second (autocommit, one
 * row each, by primary key) from `connections` concurrent connections for
 * `seconds`, on the same database server.
 */
export async function baselineUpdatesPerSecond(connections = 16, seconds = 3): Promise<number> {
  const b = await benchDb(connections)
  try {
    await b.db.query('CREATE TABLE bench_counter (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB')
    const rows = Array.from({ length: 1000 }, (_, i) => `(${i}, 0)`).join(',')
    await b.db.query(`INSERT INTO bench_counter VALUES ${rows}`)
    let count = 0
    const deadline = Date.now() + seconds * 1000
    const started = Date.now()
    await Promise.all(
      Array.from({ length: connections }, async (_, c) => {
        let i = c
        while (Date.now() < deadline) {
          await b.db.run('UPDATE bench_counter SET n = n + 1 WHERE id = ?', [i % 1000])
          i += connections
          count++
        }
      }),
    )
    return count / ((Date.now() - started) / 1000)
  } finally {
    await b.drop()
  }
}

export interface BenchResult {
  value: number
  unit: string
  baseline: number | null
  ratio: number | null
  target: string
  met: boolean
  detail?: Record<string, unknown>
}

export const RESULTS_FILE = new URL('./results.json', import.meta.url)

/** Merge one benchmark's entry into bench/results.json. */
export async function saveResult(name: string, result: BenchResult): Promise<void> {
  let all: Record<string, BenchResult> = {}
  try {
    all = JSON.parse(await readFile(RESULTS_FILE, 'utf8'))
  } catch {
    // First result of this machine: start a new file.
  }
  all[name] = result
  await writeFile(RESULTS_FILE, `${formatJson(all)}\n`)
}

/**
 * JSON.stringify with 2 spaces, but a short array of numbers or strings on one
 * line: the layout `npm run lint` (biome) expects of bench/results.json.
 */
export function formatJson(value: unknown): string {
  return JSON.stringify(value, null, 2).replace(
    /\[\n\s*((?:-?[\d.e+-]+|"[^"\n]*")(?:,\n\s*(?:-?[\d.e+-]+|"[^"\n]*"))*)\n\s*\]/g,
    (all, items: string) => {
      const line = `[${items.split(/,\n\s*/).join(', ')}]`
      return line.length <= 80 ? line : all
    },
  )
}

export async function readResults(): Promise<Record<string, BenchResult>> {
  try {
    return JSON.parse(await readFile(RESULTS_FILE, 'utf8'))
  } catch {
    return {}
  }
}

/** One table row per result: the figures without the detail. */
export function printResults(results: Record<string, BenchResult>): void {
  const round = (n: number | null) => (n === null ? null : Number(n.toPrecision(4)))
  console.table(
    Object.fromEntries(
      Object.entries(results).map(([name, r]) => [
        name,
        {
          value: round(r.value),
          unit: r.unit,
          baseline: round(r.baseline),
          ratio: round(r.ratio),
          target: r.target,
          met: r.met,
        },
      ]),
    ),
  )
}

export function printTable(rows: Record<string, unknown>[]): void {
  console.table(rows)
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** The largest of `values`, NaN when empty; a loop, since `Math.max(...values)` overflows the stack past about 100,000. */
export function maxOf(values: readonly number[]): number {
  let max = Number.NaN
  for (const v of values) if (!(v <= max)) max = v
  return max
}

/** The median of `values` (the mean of the middle two for an even count); NaN when empty. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

/** The `p`-th percentile (0..100) of `values`, nearest rank; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)))
  return sorted[rank - 1] as number
}

/** The node options `npm start` runs the server with: the flags before `--import tsx` in its script. */
export function startScriptNodeFlags(): string[] {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
  const script = String(pkg.scripts?.start ?? '')
  const m = /\bnode((?:\s+--[\w-]+(?:=\S+)?)*)\s+--import tsx\b/.exec(script)
  if (!m) throw new Error(`cannot read node's flags from the start script: ${script}`)
  return (m[1] ?? '').split(/\s+/).filter(Boolean)
}

/** A MariaDB global status counter (e.g. `Com_select`) on the bench server. */
export async function globalStatus(name: string): Promise<number> {
  const c = await mysql.createConnection({ uri: BENCH_SERVER })
  try {
    const [rows] = await c.query('SHOW GLOBAL STATUS LIKE ?', [name])
    const row = (rows as { Value: string }[])[0]
    return Number(row?.Value ?? Number.NaN)
  } finally {
    await c.end()
  }
}

/**
 * CPU time (ms) used so far by every local process named `comm` (`mariadbd`;
 * `postgres`, whose backends are one process per connection), read from /proc;
 * null when there is none (the server is elsewhere) or this is not Linux. Two
 * readings around a benchmark tell how much of its cost was the database's.
 * A process that exits between the readings takes its share with it.
 */
export function serverCpuMs(comm: string): number | null {
  try {
    let ms = 0
    let found = false
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue
      try {
        if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== comm) continue
        ms += processCpuMs(Number(pid))
        found = true
      } catch {
        // The process ended while being read.
      }
    }
    return found && Number.isFinite(ms) ? ms : null
  } catch {
    return null
  }
}

/**
 * CPU time (ms, user + system) process `pid` used so far, from
 * `/proc/<pid>/stat`: in 100 Hz clock ticks, so 10 ms steps. Throws when
 * the process is gone.
 */
export function processCpuMs(pid: number): number {
  // Fields after "(comm) ": state is [0], utime [11], stime [12], in clock ticks (100 Hz on Linux).
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) * 10
}

/**
 * CPU time (ns) used so far by every thread of process `pid`, from
 * `/proc/<pid>/task/<tid>/schedstat`: where {@link serverCpuMs}'s 10 ms clock
 * ticks are too coarse (one statement, one tick of the runner). A thread
 * that ends between two readings takes its time with it; a server's worker
 * threads live as long as their connections.
 */
export function processCpuNs(pid: number): number {
  let ns = 0
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0])
    } catch {
      // The thread ended between the listing and the read: its time is gone either way.
    }
  }
  return ns
}

/** CPU per unit of work, in µs: this process's, and the local database server's (null if not local). */
export interface CpuPerUnit {
  processUs: number
  databaseUs: number | null
}

/**
 * Start measuring the CPU of this process and of the local database server
 * named `serverComm` (see {@link serverCpuMs}); `perUnit(n)` reads both now and
 * divides what was spent since the start by `n` units of work.
 */
export function cpuMeter(serverComm: string): { perUnit(units: number): CpuPerUnit } {
  const processFrom = process.cpuUsage()
  const serverFrom = serverCpuMs(serverComm)
  return {
    perUnit(units) {
      const spent = process.cpuUsage(processFrom)
      const serverTo = serverCpuMs(serverComm)
      return {
        processUs: Math.round(((spent.user + spent.system) / units) * 10) / 10,
        databaseUs:
          serverFrom === null || serverTo === null
            ? null
            : Math.round(((serverTo - serverFrom) * 1000) / units),
      }
    },
  }
}

/**
 * Run `fn` when `moduleUrl` is the entry point (`npx tsx bench/x.ts`), then exit:
 * a pool or a socket left open must not keep a finished benchmark alive.
 */
export function runMain(moduleUrl: string, fn: () => Promise<unknown>): void {
  if (moduleUrl !== `file://${process.argv[1]}`) return
  fn().then(
    () => process.exit(0),
    (err) => {
      console.error(err)
      process.exit(1)
    },
  )
}
