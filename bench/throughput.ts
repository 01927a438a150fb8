/**
 * Throughput: single-step runs (`core.log`) due at one instant, made by
 * schedules (1,000 scopes a definition, each firing once at the instant),
 * through the real server (buildApp through loadConfig, runner co-hosted) on one
 * instance, then on three sharing the database, in runs completed per second
 * from the instant, beside the machine's baseline of durable single-row UPDATEs
 * per second over 16 connections on the same MariaDB. In the same run, the peer:
 * graphile-worker on the local PostgreSQL (bench/peer.ts), and ours ÷ theirs.
 * Both sides get one unmeasured warm-up round of 20,000, then BENCH_ROUNDS (3)
 * rounds in turn; each figure is a median. The measured rounds are sized by
 * time, not by count: as many runs as the faster side's warm-up rate gets
 * through in BENCH_ROUND_SECONDS (3), the same number for both sides, so a
 * round's fixed costs (the wake-up at the instant, a first poll) weigh alike
 * on a slow machine and a fast one. BENCH_RUNS fixes the count instead.
 *
 * The server gets only user-settable environment settings (THROUGHPUT_SETTINGS,
 * docs/performance.md), named in the results. A run counts when its
 * `completed` status is committed: the clock stops at the newest `ended_at`
 * (stamped by the database).
 */

import {
  type BenchResult,
  baselineUpdatesPerSecond,
  benchDb,
  cpuMeter,
  median,
  printResults,
  runMain,
  saveResult,
  sleep,
} from './lib.ts'
import { measurePeer, type PeerMeasure } from './peer.ts'
import {
  instantAhead,
  scheduleAtInstant,
  serverStatements,
  startScheduledServer,
  waitAllTerminal,
} from './scheduled.ts'
import { startBenchServer } from './server.ts'

/** Runs in a warm-up round, and in every round when BENCH_RUNS sets a count. */
const WARM_UP_RUNS = Number(process.env.BENCH_RUNS ?? 20_000)
const FIXED_RUNS = process.env.BENCH_RUNS ? WARM_UP_RUNS : null
/** How long a measured round should last at the faster side's warm-up pace. */
const ROUND_SECONDS = Number(process.env.BENCH_ROUND_SECONDS ?? 3)
/** Bounds of a round sized by time: no shorter than the old fixed count, no longer than a minute's set-up. */
const MIN_ROUND_RUNS = 20_000
const MAX_ROUND_RUNS = 200_000
/** Measured rounds of ours and the peer, taken in turn after one warm-up round each. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3))
/**
 * Time between creating the schedules and their instant: materialisation must
 * be done by then. It takes about 3 s for 60,000 runs here; a quarter of a
 * millisecond a run leaves room for a machine twice as slow.
 */
const leadMs = (runs: number) => Number(process.env.BENCH_LEAD_MS ?? Math.max(10_000, runs / 4))

/** Runs in a measured round: BENCH_RUNS, or ROUND_SECONDS at the faster warm-up rate, in thousands. */
export function roundRuns(warmUpRates: readonly number[]): number {
  if (FIXED_RUNS !== null) return FIXED_RUNS
  const runs = Math.round((Math.max(...warmUpRates) * ROUND_SECONDS) / 1000) * 1000
  return Math.min(MAX_ROUND_RUNS, Math.max(MIN_ROUND_RUNS, runs))
}
/**
 * The settings of each server, all user-settable environment variables;
 * BENCH_THROUGHPUT_SETTINGS (JSON) sets them. None by default: the headline
 * is what `npm start` gives without tuning. The defaults are what won here (a
 * backlog of due runs drains a start batch per transaction, so a larger batch
 * and more start transactions in flight win: 2,000 runs a batch with 4 in
 * flight beat 2,500 with 2 by 10% and 17%, and 1,000 with 2 by about a fifth).
 */
export const THROUGHPUT_SETTINGS: Record<string, string> = JSON.parse(
  process.env.BENCH_THROUGHPUT_SETTINGS ?? '{}',
)

const PROGRAM = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] }

export interface ThroughputMeasure {
  runsPerSecond: number
  seconds: number
  /** Statements the servers sent from the instant on, per run. */
  statementsPerRun: number
  failed: number
  /** CPU per run, in µs, of this process (the servers) and of the local MariaDB (null if not local). */
  cpuPerRun: { runnerUs: number; databaseUs: number | null }
}

/** `runs` runs due at one instant through `instances` servers on one fresh database. */
export async function measure(instances: number, runs: number): Promise<ThroughputMeasure> {
  const b = await benchDb(4)
  try {
    const first = await startScheduledServer(b.url, { ...THROUGHPUT_SETTINGS, INSTANCE_ID: 'bench-0' })
    const servers = [first]
    try {
      for (let i = 1; i < instances; i++)
        servers.push(await startBenchServer(b.url, { ...THROUGHPUT_SETTINGS, INSTANCE_ID: `bench-${i}` }))
      const instant = instantAhead(leadMs(runs))
      await scheduleAtInstant(first, b.db, { slug: 'tp', runs, instant, program: PROGRAM })
      await sleep(instant.getTime() - Date.now() - 20)
      const before = servers.reduce((n, s) => n + serverStatements(s), 0)
      const cpu = cpuMeter('mariadbd')
      // The progress poll asks only whether any run is left: one LIMIT 1 probe per 100 ms.
      await waitAllTerminal(b.db, 300_000, 100)
      const { processUs, databaseUs } = cpu.perUnit(runs)
      const statements = servers.reduce((n, s) => n + serverStatements(s), 0) - before
      const [last] = await b.db.query<{ at: Date | null }>('SELECT MAX(ended_at) AS at FROM event_runs')
      const [done] = await b.db.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'completed'`,
      )
      if (!last?.at) throw new Error('no run has ended')
      const seconds = (last.at.getTime() - instant.getTime()) / 1000
      return {
        runsPerSecond: runs / seconds,
        seconds,
        statementsPerRun: statements / runs,
        // Anything that did not complete (failed, missed, cancelled) is a failure of the run.
        failed: runs - Number(done?.n),
        cpuPerRun: { runnerUs: processUs, databaseUs },
      }
    } finally {
      for (const s of servers.reverse()) await s.stop()
    }
  } finally {
    await b.drop()
  }
}

const round0 = (n: number) => Math.round(n)

export async function run(): Promise<Record<string, BenchResult>> {
  const baseline = await baselineUpdatesPerSecond(16, 3)
  console.log(`throughput: baseline ${baseline.toFixed(0)} durable single-row UPDATEs/s over 16 connections`)

  // A long-running service and a long-running worker are both measured warm:
  // one unmeasured round each first (the process compiling its hot paths, the
  // servers' caches), then ROUNDS rounds taken in turn, ours then theirs, so a
  // noisy minute on a 2-core machine lands on both sides. The figure is each
  // side's median; the warm-up rounds are reported beside it, not hidden.
  const warmOurs = await measure(1, WARM_UP_RUNS)
  const warmTheirs = await measurePeer(WARM_UP_RUNS)
  const RUNS = roundRuns([warmOurs.runsPerSecond, warmTheirs.jobsPerSecond])
  console.log(
    `throughput: warm-up round (${WARM_UP_RUNS} each): ours ${warmOurs.runsPerSecond.toFixed(0)} runs/s, ` +
      `graphile-worker ${warmTheirs.jobsPerSecond.toFixed(0)} jobs/s (not counted); ` +
      `rounds of ${RUNS} ${FIXED_RUNS === null ? `(about ${ROUND_SECONDS} s at the faster pace)` : '(BENCH_RUNS)'}`,
  )
  const ours: ThroughputMeasure[] = []
  const theirs: PeerMeasure[] = []
  for (let round = 1; round <= ROUNDS; round++) {
    const one = await measure(1, RUNS)
    const peer = await measurePeer(RUNS)
    ours.push(one)
    theirs.push(peer)
    console.log(
      `throughput: round ${round}: 1 instance ${one.runsPerSecond.toFixed(0)} runs/s (${RUNS} runs in ` +
        `${one.seconds.toFixed(2)} s, ${one.statementsPerRun.toFixed(3)} statements/run; CPU per run: runner ` +
        `${one.cpuPerRun.runnerUs} µs, MariaDB ${one.cpuPerRun.databaseUs ?? 'n/a'} µs) | graphile-worker ` +
        `${peer.jobsPerSecond.toFixed(0)} jobs/s (CPU per job: worker ${peer.cpuPerJob.workerUs} µs, ` +
        `PostgreSQL ${peer.cpuPerJob.databaseUs ?? 'n/a'} µs)`,
    )
  }
  const oursRate = median(ours.map((m) => m.runsPerSecond))
  const theirsRate = median(theirs.map((m) => m.jobsPerSecond))
  // The round whose rate is the median, for its details.
  const one = ours.reduce((a, b) =>
    Math.abs(b.runsPerSecond - oursRate) < Math.abs(a.runsPerSecond - oursRate) ? b : a,
  )
  const peer = theirs.reduce((a, b) =>
    Math.abs(b.jobsPerSecond - theirsRate) < Math.abs(a.jobsPerSecond - theirsRate) ? b : a,
  )
  const failed = ours.reduce((n, m) => n + m.failed, 0)
  console.log(
    `throughput: median of ${ROUNDS}: ours ${oursRate.toFixed(0)} runs/s, graphile-worker ` +
      `${theirsRate.toFixed(0)} jobs/s; ours ÷ theirs = ${(oursRate / theirsRate).toFixed(3)}`,
  )
  const three = await measure(3, RUNS)
  console.log(
    `throughput: 3 instances ${three.runsPerSecond.toFixed(0)} runs/s (${RUNS} runs in ${three.seconds.toFixed(2)} s, ` +
      `${three.statementsPerRun.toFixed(3)} statements/run)`,
  )
  const results: Record<string, BenchResult> = {
    throughput: {
      value: round0(oursRate),
      unit: 'runs/s',
      baseline: round0(baseline),
      ratio: oursRate / baseline,
      target: '>= 1000 runs/s on one instance',
      met: oursRate >= 1000 && failed === 0,
      detail: {
        runs: RUNS,
        roundSizing:
          FIXED_RUNS === null
            ? `${ROUND_SECONDS} s at the faster warm-up rate, ${MIN_ROUND_RUNS}–${MAX_ROUND_RUNS} runs`
            : 'BENCH_RUNS',
        rounds: ROUNDS,
        roundsRunsPerSecond: ours.map((m) => round0(m.runsPerSecond)),
        warmUpRunsPerSecond: round0(warmOurs.runsPerSecond),
        seconds: one.seconds,
        statementsPerRun: one.statementsPerRun,
        failed,
        source: `${Math.ceil(RUNS / 1000)} definitions × 1,000 scopes, one schedule instant, through buildApp`,
        settings: THROUGHPUT_SETTINGS,
        cpuPerRunUs: one.cpuPerRun,
        baselineUnit: 'durable single-row UPDATEs/s over 16 connections',
      },
    },
    throughput3: {
      value: round0(three.runsPerSecond),
      unit: 'runs/s',
      baseline: round0(baseline),
      ratio: three.runsPerSecond / baseline,
      target: 'reported (3 instances, one database)',
      met: three.failed === 0,
      detail: {
        runs: RUNS,
        seconds: three.seconds,
        statementsPerRun: three.statementsPerRun,
        failed: three.failed,
        settings: THROUGHPUT_SETTINGS,
        versusOneInstance: three.runsPerSecond / oursRate,
      },
    },
    peerRatio: {
      value: oursRate / theirsRate,
      unit: 'x (ours ÷ graphile-worker)',
      baseline: round0(theirsRate),
      ratio: oursRate / theirsRate,
      target: '>= 1.5x graphile-worker 0.17.3 (concurrency 24, pool 25, localQueue 500, batch delays 0)',
      met: oursRate >= 1.5 * theirsRate,
      detail: {
        method: `median of ${ROUNDS} interleaved rounds each, after one unmeasured warm-up round each`,
        oursRunsPerSecond: oursRate,
        theirsJobsPerSecond: theirsRate,
        roundsRatio: ours.map((m, i) => m.runsPerSecond / (theirs[i] as PeerMeasure).jobsPerSecond),
        theirsRoundsJobsPerSecond: theirs.map((m) => round0(m.jobsPerSecond)),
        warmUp: {
          oursRunsPerSecond: round0(warmOurs.runsPerSecond),
          theirsJobsPerSecond: round0(warmTheirs.jobsPerSecond),
        },
        theirsSeconds: peer.seconds,
        oursCpuPerRunUs: one.cpuPerRun,
        theirsCpuPerJobUs: peer.cpuPerJob,
        jobs: peer.jobs,
        baselineUnit: 'graphile-worker no-op jobs/s on PostgreSQL 15, same machine, same run',
      },
    },
  }
  for (const [name, r] of Object.entries(results)) await saveResult(name, r)
  return results
}

runMain(import.meta.url, async () => printResults(await run()))
