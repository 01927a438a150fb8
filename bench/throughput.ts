/**
 * Throughput: 20,000 due single-step runs (`core.log`) through one runner
 * instance, then through three, in runs completed per second, beside the
 * machine's baseline of durable single-row UPDATEs per second over 16
 * connections on the same MariaDB. In the same run, the peer: graphile-worker on
 * the local PostgreSQL (bench/peer.ts), and ours ÷ theirs. Both sides get one
 * unmeasured warm-up round, then BENCH_ROUNDS (3) rounds in turn; each figure is
 * a median.
 *
 * A run counts when its `completed` status is committed: the clock stops at the
 * newest `ended_at` (stamped by the database), so the progress poll (every
 * 100 ms, on its own pool) does not round the figure.
 */
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner, type RunnerLogger } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
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

const RUNS = Number(process.env.BENCH_RUNS ?? 20_000)
const BATCH = Number(process.env.BENCH_BATCH ?? 2500)
const START_CONCURRENCY = Number(process.env.BENCH_START_CONCURRENCY ?? 2)
/** Measured rounds of ours and the peer, taken in turn after one warm-up round each. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3))
/** No run is left after this: a stuck runner fails the benchmark instead of hanging it. */
const TIMEOUT_MS = 300_000

const debugLogger: RunnerLogger = {
  info() {},
  debug() {},
  warn: (o, m) => console.warn(m, (o as { err?: Error }).err?.message),
  error: (o, m) => console.error(m, (o as { err?: Error }).err?.message),
}

async function seed(db: Db): Promise<void> {
  const registry = createDefaultRegistry()
  const def = await createDefinition(
    { db, registry, clock: systemClock },
    {
      slug: 'bench',
      title: 'Bench',
      graceSeconds: 3600,
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] },
    },
    'bench',
  )
  // All due a minute ago, one millisecond apart (one occurrence each).
  const base = Date.now() - 60_000
  for (let i = 0; i < RUNS; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, RUNS - i) }, (_, j) => ({
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope: '',
      scheduledFor: new Date(base + i + j),
      timezone: 'UTC',
      concurrencyKey: null,
      startedBy: 'bench',
    }))
    await runs.materialiseMany(db, batch)
  }
}

export interface ThroughputMeasure {
  runsPerSecond: number
  seconds: number
  /** Statements the runners sent, per run. */
  statementsPerRun: number
  failed: number
  /** CPU per run, in µs, of this process (the runners) and of the local MariaDB (null if not local). */
  cpuPerRun: { runnerUs: number; databaseUs: number | null }
}

/** 20,000 due runs through `instances` runners on one fresh database (each runner its own pool). */
export async function measure(instances: number): Promise<ThroughputMeasure> {
  const b = await benchDb(4)
  try {
    await seed(b.db)
    const registry = createDefaultRegistry()
    const pools = Array.from({ length: instances }, () => b.open(20))
    const runners = pools.map(
      (db, i) =>
        new Runner({
          db,
          registry,
          tickMs: 10,
          leaseMs: 30_000,
          batchSize: BATCH,
          parallelism: 16,
          startConcurrency: START_CONCURRENCY,
          instanceId: `bench-${i}`,
          logger: process.env.BENCH_DEBUG ? debugLogger : undefined,
        }),
    )
    const startedAt = Date.now()
    const cpu = cpuMeter('mariadbd')
    for (const r of runners) r.start()
    // The progress poll asks only whether any run is left: one probe of the
    // status index (LIMIT 1), so the observer costs the database next to nothing.
    // (Counting what was left read every unfinished run each poll: about 14 µs of
    // MariaDB CPU per run measured, inside the measured window.)
    const left = async () => {
      const rows = await b.db.query<{ id: number }>(
        `SELECT id FROM event_runs WHERE status IN ('scheduled', 'starting', 'running', 'paused', 'ending') LIMIT 1`,
      )
      return rows.length
    }
    while ((await left()) > 0) {
      if (Date.now() - startedAt > TIMEOUT_MS) throw new Error(`runs still unfinished after ${TIMEOUT_MS} ms`)
      await sleep(100)
    }
    // Before the runners stop: their stop is not part of the work measured.
    // The progress poll (one LIMIT 1 probe per 100 ms) is counted in.
    const { processUs, databaseUs } = cpu.perUnit(RUNS)
    await Promise.all(runners.map((r) => r.stop()))
    const counts = await runs.countByStatus(b.db)
    const [last] = await b.db.query<{ at: Date | null }>('SELECT MAX(ended_at) AS at FROM event_runs')
    if (!last?.at) throw new Error('no run has ended')
    const seconds = (last.at.getTime() - startedAt) / 1000
    const statements = pools.reduce((n, p) => n + p.stats.statements, 0)
    return {
      runsPerSecond: RUNS / seconds,
      seconds,
      statementsPerRun: statements / RUNS,
      // Anything that did not complete (failed, missed, cancelled) is a failure of the run.
      failed: RUNS - counts.completed,
      cpuPerRun: { runnerUs: processUs, databaseUs },
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
  const warmOurs = await measure(1)
  const warmTheirs = await measurePeer(RUNS)
  console.log(
    `throughput: warm-up round: ours ${warmOurs.runsPerSecond.toFixed(0)} runs/s, ` +
      `graphile-worker ${warmTheirs.jobsPerSecond.toFixed(0)} jobs/s (not counted)`,
  )
  const ours: ThroughputMeasure[] = []
  const theirs: PeerMeasure[] = []
  for (let round = 1; round <= ROUNDS; round++) {
    const one = await measure(1)
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
  const three = await measure(3)
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
        rounds: ROUNDS,
        roundsRunsPerSecond: ours.map((m) => round0(m.runsPerSecond)),
        warmUpRunsPerSecond: round0(warmOurs.runsPerSecond),
        seconds: one.seconds,
        statementsPerRun: one.statementsPerRun,
        failed,
        batchSize: BATCH,
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
        versusOneInstance: three.runsPerSecond / oursRate,
      },
    },
    peerRatio: {
      value: oursRate / theirsRate,
      unit: 'x (ours ÷ graphile-worker)',
      baseline: round0(theirsRate),
      ratio: oursRate / theirsRate,
      target: '>= 1.0x graphile-worker 0.17.3 (concurrency 24, pool 25, localQueue 500, batch delays 0)',
      met: oursRate >= theirsRate,
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
