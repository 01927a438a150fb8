/**
 * Runs the way users make them: definitions created over GraphQL with a cron
 * schedule that fires once, at one chosen instant, over many scopes; the
 * co-hosted runner (buildApp, configured through loadConfig) materialises and
 * starts them. Nothing here inserts a run.
 */
import type { Db, DbStats } from '../sql/db.ts'
import { sleep } from './lib.ts'
import { type BenchServer, startBenchServer } from './server.ts'

/** An admin token for the benchmarks' own set-up (creating definitions). */
export const BENCH_ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef'

/** The most scopes one definition takes (the API refuses more). */
export const MAX_SCOPES_PER_DEFINITION = 1000

/** The server with an admin token beside the viewer and operator ones, and `env` on top. */
export function startScheduledServer(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<BenchServer> {
  return startBenchServer(databaseUrl, {
    SHOWRUNNER_TOKENS: `admin:${BENCH_ADMIN_TOKEN},viewer:bench-viewer-token-0123456789`,
    ...env,
  })
}

export async function graphql<T>(
  url: string,
  query: string,
  variables: Record<string, unknown> = {},
): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${BENCH_ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ query, variables }),
  })
  const body = (await res.json()) as { data?: T; errors?: { message: string }[] }
  if (res.status !== 200 || body.errors || !body.data)
    throw new Error(`GraphQL answered HTTP ${res.status}: ${JSON.stringify(body).slice(0, 400)}`)
  return body.data
}

/** A 6-field cron (seconds first) that fires once a year, at `instant` (a whole second, UTC). */
export function cronAt(instant: Date): string {
  return [
    instant.getUTCSeconds(),
    instant.getUTCMinutes(),
    instant.getUTCHours(),
    instant.getUTCDate(),
    instant.getUTCMonth() + 1,
    '*',
  ].join(' ')
}

/** The next whole second at least `leadMs` from now. */
export function instantAhead(leadMs: number): Date {
  return new Date(Math.ceil((Date.now() + leadMs) / 1000) * 1000)
}

const CREATE = `mutation Create($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`

/**
 * `runs` runs of `program`, all due at `instant`: ⌈runs / 1000⌉ definitions
 * (slugs `${slug}-0`, …), each scheduled at `instant` over up to 1,000 scopes.
 * Answers the definition ids once every run is materialised (the runner does
 * it, nudged by each create); throws if that is not done `marginMs` before the
 * instant, since the figure would then measure the materialisation too.
 */
export async function scheduleAtInstant(
  server: BenchServer,
  db: Db,
  opts: { slug: string; runs: number; instant: Date; program: unknown; marginMs?: number },
): Promise<number[]> {
  const ids: number[] = []
  for (let d = 0, left = opts.runs; left > 0; d++, left -= MAX_SCOPES_PER_DEFINITION) {
    const n = Math.min(MAX_SCOPES_PER_DEFINITION, left)
    const data = await graphql<{ createDefinition: { id: string } }>(server.graphqlUrl, CREATE, {
      input: {
        slug: `${opts.slug}-${d}`,
        title: `Bench ${opts.slug} ${d}`,
        schedule: cronAt(opts.instant),
        timezone: 'UTC',
        graceSeconds: 3600,
        scopes: Array.from({ length: n }, (_, i) => `room-${d * MAX_SCOPES_PER_DEFINITION + i}`),
        program: opts.program,
      },
    })
    ids.push(Number(data.createDefinition.id))
  }
  const margin = opts.marginMs ?? 500
  for (;;) {
    const [row] = await db.query<{ n: number }>('SELECT COUNT(*) AS n FROM event_runs')
    if (Number(row?.n) >= opts.runs) {
      if (process.env.BENCH_DEBUG)
        console.log(
          `${opts.slug}: ${opts.runs} runs materialised ${opts.instant.getTime() - Date.now()} ms ahead`,
        )
      break
    }
    if (Date.now() > opts.instant.getTime() - margin)
      throw new Error(
        `only ${row?.n} of ${opts.runs} runs were materialised ${margin} ms before the instant; raise BENCH_LEAD_MS`,
      )
    await sleep(50)
  }
  return ids
}

/**
 * What the server's pools (the API's and the runner's) have sent so far:
 * statements, and the round trips that carried them (a batch, or a
 * transaction's BEGIN riding with its first statement, is one).
 */
export function serverDbStats(server: BenchServer): DbStats {
  const { db, runnerDb } = server.app
  const runner = runnerDb && runnerDb !== db ? runnerDb.stats : { statements: 0, roundTrips: 0 }
  return {
    statements: db.stats.statements + runner.statements,
    roundTrips: db.stats.roundTrips + runner.roundTrips,
  }
}

/** Statements sent so far by the server's pools, the API's and the runner's. */
export function serverStatements(server: BenchServer): number {
  return serverDbStats(server).statements
}

/** Wait until no run is left unfinished (one LIMIT 1 probe of the status index per `everyMs`). */
export async function waitAllTerminal(db: Db, timeoutMs = 300_000, everyMs = 50): Promise<void> {
  const started = Date.now()
  for (;;) {
    const rows = await db.query<{ id: number }>(
      `SELECT id FROM event_runs WHERE status IN ('scheduled', 'starting', 'running', 'paused', 'ending') LIMIT 1`,
    )
    if (rows.length === 0) return
    if (Date.now() - started > timeoutMs) throw new Error(`runs still unfinished after ${timeoutMs} ms`)
    await sleep(everyMs)
  }
}

export interface RunTimes {
  completed: number
  notCompleted: number
  /** Each completed run's ended_at, ms since the epoch (the database's clock, the same machine). */
  ended: number[]
  /** Each started run's started_at − scheduled_for, ms. */
  startLag: number[]
}

export async function runTimes(db: Db): Promise<RunTimes> {
  const rows = await db.query<{
    status: string
    ended_at: Date | null
    started_at: Date | null
    scheduled_for: Date
  }>('SELECT status, ended_at, started_at, scheduled_for FROM event_runs')
  const done = rows.filter((r) => r.status === 'completed' && r.ended_at)
  return {
    completed: done.length,
    notCompleted: rows.length - done.length,
    ended: done.map((r) => (r.ended_at as Date).getTime()),
    startLag: rows
      .filter((r) => r.started_at)
      .map((r) => (r.started_at as Date).getTime() - r.scheduled_for.getTime()),
  }
}
