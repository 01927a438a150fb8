/**
 * Galera: a burst of single-step runs (`core.log`) all due at one instant,
 * through three runner instances on the three nodes of test/galera/cluster.sh's
 * cluster (instance N on node N), beside one instance on one node of the same
 * cluster, and, for scale, one and three instances on the single MariaDB of the
 * other benchmarks. For each: runs completed per second, and conflicts per
 * 1,000 runs: on the cluster, transactions that failed certification or were
 * aborted by a replicated write (`wsrep_local_cert_failures` +
 * `wsrep_local_bf_aborts`, summed over the nodes), plus InnoDB deadlocks; on
 * the single server, InnoDB deadlocks. Each conflict cost one retry.
 *
 * BENCH_GALERA_RUNS (default 20,000) sets the burst. The cluster is started
 * when it is not running and stopped afterwards (KEEP_GALERA=1 keeps it).
 */
import mysql from 'mysql2/promise'
import { createDb, type Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { migrate } from '../sql/migrate.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import {
  cluster,
  conflictCounters,
  createClusterDatabase,
  NODE_PORTS,
  nodeUrl,
} from '../test/galera/cluster.ts'
import { BENCH_SERVER, type BenchResult, benchDb, printResults, runMain, saveResult, sleep } from './lib.ts'

const RUNS = Number(process.env.BENCH_GALERA_RUNS ?? 20_000)
const TIMEOUT_MS = 600_000

/** Every run due at the same instant: one occurrence per scope. */
async function seed(db: Db): Promise<void> {
  const def = await createDefinition(
    { db, registry: createDefaultRegistry(), clock: systemClock },
    {
      slug: 'burst',
      title: 'Burst',
      graceSeconds: 3600,
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] },
    },
    'bench',
  )
  const at = new Date(Date.now() - 1000)
  for (let i = 0; i < RUNS; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, RUNS - i) }, (_, j) => ({
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope: `s${i + j}`,
      scheduledFor: at,
      timezone: 'UTC',
      concurrencyKey: null,
      startedBy: 'bench',
    }))
    await runs.materialiseMany(db, batch)
  }
}

/** Conflicts counted on the servers at `ports`: Galera's two counters and InnoDB deadlocks. */
async function conflictsOn(ports: readonly number[]): Promise<number> {
  let total = 0
  for (const port of ports) {
    const galera = await conflictCounters(port)
    const c = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root' })
    try {
      const [rows] = await c.query<mysql.RowDataPacket[]>("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
      total += galera.certFailures + galera.bfAborts + Number(rows[0]?.Value ?? 0)
    } finally {
      await c.end()
    }
  }
  return total
}

interface BurstMeasure {
  runsPerSecond: number
  seconds: number
  conflictsPer1000: number
  notCompleted: number
}

/**
 * The burst through one runner per URL of `instanceUrls` (all naming the same
 * database), timed from their start to the newest `ended_at`.
 */
async function burst(
  seedUrl: string,
  instanceUrls: string[],
  serverPorts: readonly number[],
): Promise<BurstMeasure> {
  const seedDb = createDb(seedUrl, { connectionLimit: 4 })
  const pools = instanceUrls.map((url) => createDb(url, { connectionLimit: 20 }))
  try {
    await migrate(seedDb)
    await seed(seedDb)
    const registry = createDefaultRegistry()
    const runners = pools.map(
      (db, i) =>
        new Runner({
          db,
          registry,
          tickMs: 10,
          leaseMs: 30_000,
          batchSize: 2500,
          parallelism: 16,
          startConcurrency: 2,
          instanceId: `bench-galera-${i}`,
        }),
    )
    const conflictsBefore = await conflictsOn(serverPorts)
    const startedAt = Date.now()
    for (const r of runners) r.start()
    for (;;) {
      const left = await seedDb.query<{ id: number }>(
        `SELECT id FROM event_runs WHERE status IN ('scheduled', 'starting', 'running', 'paused', 'ending') LIMIT 1`,
      )
      if (left.length === 0) break
      if (Date.now() - startedAt > TIMEOUT_MS) throw new Error(`runs still unfinished after ${TIMEOUT_MS} ms`)
      await sleep(100)
    }
    await Promise.all(runners.map((r) => r.stop()))
    const conflicts = (await conflictsOn(serverPorts)) - conflictsBefore
    const counts = await runs.countByStatus(seedDb)
    const [last] = await seedDb.query<{ at: Date | null }>('SELECT MAX(ended_at) AS at FROM event_runs')
    if (!last?.at) throw new Error('no run has ended')
    const seconds = (last.at.getTime() - startedAt) / 1000
    return {
      runsPerSecond: RUNS / seconds,
      seconds,
      conflictsPer1000: (conflicts / RUNS) * 1000,
      notCompleted: RUNS - counts.completed,
    }
  } finally {
    await Promise.allSettled([seedDb, ...pools].map((p) => p.close()))
  }
}

/** The burst on a fresh database of the cluster, the instances on `nodes` (1-based). */
async function onCluster(nodes: number[]): Promise<BurstMeasure> {
  const d = await createClusterDatabase('showrunner_bench_galera')
  try {
    return await burst(
      nodeUrl(nodes[0] as number, d.name),
      nodes.map((n) => nodeUrl(n, d.name)),
      NODE_PORTS,
    )
  } finally {
    await d.drop()
  }
}

/** The burst on a fresh database of the single MariaDB. */
async function onSingle(instances: number): Promise<BurstMeasure> {
  const b = await benchDb(2)
  const port = Number(new URL(BENCH_SERVER).port || 3306)
  try {
    return await burst(
      b.url,
      Array.from({ length: instances }, () => b.url),
      [port],
    )
  } finally {
    await b.drop()
  }
}

const round1 = (n: number) => Math.round(n * 10) / 10

export async function run(): Promise<Record<string, BenchResult>> {
  console.log(`galera: ${(await cluster(['start'])).split('\n').at(-3) ?? ''}`)
  try {
    const measured: Record<string, BurstMeasure> = {}
    for (const [name, how] of [
      ['3 instances on 3 Galera nodes', () => onCluster([1, 2, 3])],
      ['1 instance on 1 Galera node', () => onCluster([1])],
      ['1 instance on the single MariaDB', () => onSingle(1)],
      ['3 instances on the single MariaDB', () => onSingle(3)],
    ] as const) {
      const m = await how()
      measured[name] = m
      console.log(
        `galera: ${name}: ${m.runsPerSecond.toFixed(0)} runs/s (${RUNS} runs in ${m.seconds.toFixed(2)} s), ` +
          `${m.conflictsPer1000.toFixed(1)} conflicts per 1,000 runs, ${m.notCompleted} not completed`,
      )
    }
    const three = measured['3 instances on 3 Galera nodes'] as BurstMeasure
    const one = measured['1 instance on 1 Galera node'] as BurstMeasure
    const single = measured['1 instance on the single MariaDB'] as BurstMeasure
    const failed = Object.values(measured).reduce((n, m) => n + m.notCompleted, 0)
    const results: Record<string, BenchResult> = {
      galera3: {
        value: Math.round(three.runsPerSecond),
        unit: 'runs/s',
        baseline: Math.round(one.runsPerSecond),
        ratio: three.runsPerSecond / one.runsPerSecond,
        target: 'reported (3 instances on 3 Galera nodes ÷ 1 instance on 1 node); every run completed',
        met: failed === 0,
        detail: {
          runs: RUNS,
          figures: Object.fromEntries(
            Object.entries(measured).map(([k, m]) => [
              k,
              {
                runsPerSecond: Math.round(m.runsPerSecond),
                seconds: round1(m.seconds),
                conflictsPer1000Runs: round1(m.conflictsPer1000),
                notCompleted: m.notCompleted,
              },
            ]),
          ),
          versusSingleMariaDb: three.runsPerSecond / single.runsPerSecond,
          conflicts:
            'Galera: wsrep_local_cert_failures + wsrep_local_bf_aborts over the nodes, plus Innodb_deadlocks; single server: Innodb_deadlocks',
        },
      },
    }
    for (const [name, r] of Object.entries(results)) await saveResult(name, r)
    return results
  } finally {
    if (process.env.KEEP_GALERA !== '1') await cluster(['stop']).catch((err) => console.error(String(err)))
  }
}

runMain(import.meta.url, async () => printResults(await run()))
