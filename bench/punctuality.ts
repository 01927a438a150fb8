/**
 * Punctuality: how late a scheduled run starts. One definition fires every
 * second (`* * * * * *`, one `core.log` step) on the real server (buildApp
 * through loadConfig, default TICK_MS) for BENCH_PUNCTUALITY_SECONDS (60) in
 * each of three conditions, in turn on the same server:
 *  1. idle: nothing else to do;
 *  2. parked: 10,000 runs (BENCH_PARKED_RUNS) parked on cues, made by schedules
 *     (10 definitions × 1,000 scopes) and driven to their cue by the runner;
 *  3. loaded: the same, with the API under the apiLatency load (32 clients
 *     asking runs(limit: 500) back to back, from another process).
 * Figure: p50/p99/max of started_at − scheduled_for over the runs due in each
 * window. Targets: idle p99 ≤ 20 ms; parked and loaded p99 ≤ 2 × TICK_MS.
 *
 * The server lives in this process, so run it with `npm start`'s node flags
 * (`npm run bench` does): without `--no-memory-reducer`, V8 compacts the heap
 * once the process goes quiet after its start, a 20–25 ms pause that lands on
 * a tick, so on a start. The flags and the process's memory are in the results.
 */
import { loadServer } from './apiLatency.ts'
import { type BenchResult, benchDb, percentile, printResults, runMain, saveResult, sleep } from './lib.ts'
import { graphql, instantAhead, scheduleAtInstant, startScheduledServer } from './scheduled.ts'

const SECONDS = Number(process.env.BENCH_PUNCTUALITY_SECONDS ?? 60)
const PARKED = Number(process.env.BENCH_PARKED_RUNS ?? 10_000)
const LEAD_MS = Number(process.env.BENCH_LEAD_MS ?? 10_000)
const TICK_MS = 1000
/** node's own flags in this process (`npm run bench` gives it `npm start`'s). */
const nodeFlags = process.execArgv
  .filter((a, i, all) => a !== '--import' && all[i - 1] !== '--import')
  .join(' ')

const EVERY_SECOND = {
  phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'on the second' } }] }],
}
const CUE_SHOW = {
  phases: [
    { name: 'doors', steps: [{ kind: 'core.log', params: { message: 'doors open for {{run.scope}}' } }] },
    { name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Start the show in {{run.scope}}' } }] },
    { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
  ],
}

interface Lateness {
  runs: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  notStarted: number
  /** Starts more than 20 ms and more than 100 ms late: one stall or many. */
  over20Ms: number
  over100Ms: number
}

export async function run(): Promise<Record<string, BenchResult>> {
  const b = await benchDb(4)
  try {
    const server = await startScheduledServer(b.url)
    try {
      const created = await graphql<{ createDefinition: { id: string } }>(
        server.graphqlUrl,
        `mutation Create($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
        {
          input: {
            slug: 'every-second',
            title: 'Every second',
            schedule: '* * * * * *',
            timezone: 'UTC',
            program: EVERY_SECOND,
          },
        },
      )
      const tickerId = Number(created.createDefinition.id)
      // Lateness of the ticker's runs due in [from, to).
      const lateness = async (from: number, to: number): Promise<Lateness> => {
        await sleep(1500) // the last run due in the window has started (or is late)
        const rows = await b.db.query<{ started_at: Date | null; scheduled_for: Date }>(
          `SELECT started_at, scheduled_for FROM event_runs
            WHERE definition_id = ? AND scheduled_for >= ? AND scheduled_for < ?`,
          [tickerId, new Date(from), new Date(to)],
        )
        const lags = rows
          .filter((r) => r.started_at)
          .map((r) => (r.started_at as Date).getTime() - r.scheduled_for.getTime())
        return {
          runs: rows.length,
          p50Ms: percentile(lags, 50),
          p99Ms: percentile(lags, 99),
          maxMs: Math.max(...lags),
          notStarted: rows.length - lags.length,
          over20Ms: lags.filter((l) => l > 20).length,
          over100Ms: lags.filter((l) => l > 100).length,
        }
      }
      const window = async (label: string, during?: (seconds: number) => Promise<unknown>) => {
        const from = Date.now() + 1000
        const to = from + SECONDS * 1000
        if (during) await during(SECONDS + 1)
        else await sleep(to - Date.now())
        const l = await lateness(from, to)
        console.log(
          `punctuality: ${label}: ${l.runs} runs, start lag p50 ${l.p50Ms} ms, p99 ${l.p99Ms} ms, max ${l.maxMs} ms, ` +
            `${l.over20Ms} over 20 ms, ${l.over100Ms} over 100 ms` +
            (l.notStarted ? `, ${l.notStarted} not started` : ''),
        )
        return l
      }
      await sleep(2000) // the ticker's first runs materialised and running
      const idle = await window('idle')
      const idleRssMb = Math.round(process.memoryUsage().rss / 1e6)

      const instant = instantAhead(LEAD_MS)
      await scheduleAtInstant(server, b.db, { slug: 'cued', runs: PARKED, instant, program: CUE_SHOW })
      const parkDeadline = Date.now() + 300_000
      for (;;) {
        const [row] = await b.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM event_run_steps WHERE parked = 1 AND status = 'running'`,
        )
        if (Number(row?.n) >= PARKED) break
        if (Date.now() > parkDeadline) throw new Error(`only ${row?.n} of ${PARKED} runs parked on their cue`)
        await sleep(200)
      }
      const parked = await window(`${PARKED} runs parked on cues`)
      let requests = 0
      const loaded = await window(`${PARKED} parked + API load`, async (seconds) => {
        const load = await loadServer(server.graphqlUrl, seconds, 0)
        requests = load.requests
      })

      const entry = (
        l: Lateness,
        limit: number,
        target: string,
        extra: Record<string, unknown> = {},
      ): BenchResult => ({
        value: l.p99Ms,
        unit: 'ms (p99 start lag)',
        baseline: null,
        ratio: null,
        target,
        met: l.p99Ms <= limit && l.notStarted === 0 && l.runs >= SECONDS - 1,
        detail: { seconds: SECONDS, tickMs: TICK_MS, settings: 'defaults', nodeFlags, ...l, ...extra },
      })
      const results: Record<string, BenchResult> = {
        punctuality: entry(idle, 20, 'p99 <= 20 ms (idle, default TICK_MS 1000)', { rssMb: idleRssMb }),
        punctualityParked: entry(parked, 2 * TICK_MS, 'p99 <= 2 x TICK_MS', { parkedRuns: PARKED }),
        punctualityLoaded: entry(loaded, 2 * TICK_MS, 'p99 <= 2 x TICK_MS', {
          parkedRuns: PARKED,
          apiLoad: 'runs(limit: 500) from 32 clients back to back (bench/loadClient.ts)',
          apiRequests: requests,
        }),
      }
      for (const [name, r] of Object.entries(results)) await saveResult(name, r)
      return results
    } finally {
      await server.stop()
    }
  } finally {
    await b.drop()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
