/**
 * Throughput: 20,000 due single-step runs (`core.log`) through one runner
 * instance (and through three), in runs completed per second, beside the
 * machine's baseline of durable single-row UPDATEs per second.
 */
import * as runs from '../sql/eventRuns.ts'
import type { Db } from '../sql/db.ts'
import { createDefinition } from '../src/definitions.ts'
import { systemClock } from '../src/runner/engine.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { baselineUpdatesPerSecond, benchDb, saveResult, sleep } from './lib.ts'

const RUNS = Number(process.env.BENCH_RUNS ?? 20_000)

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

export async function measure(instances: number): Promise<{ runsPerSecond: number; seconds: number }> {
  const b = await benchDb(20)
  try {
    await seed(b.db)
    const registry = createDefaultRegistry()
    const runners = Array.from(
      { length: instances },
      (_, i) =>
        new Runner({
          db: i === 0 ? b.db : b.open(20),
          registry,
          tickMs: 10,
          leaseMs: 30_000,
          batchSize: Number(process.env.BENCH_BATCH ?? 1000),
          parallelism: 16,
          instanceId: `bench-${i}`,
          logger: process.env.BENCH_DEBUG ? { info() {}, debug() {}, warn: (o, m) => console.warn(m, (o as { err?: Error }).err?.message), error: (o, m) => console.error(m, (o as { err?: Error }).err?.message, (o as {err?: {cause?: Error}}).err?.cause?.message) } : undefined,
        }),
    )
    const started = Date.now()
    for (const r of runners) r.start()
    for (;;) {
      await sleep(50)
      const counts = await runs.countByStatus(b.db)
      if (counts.completed + counts.failed >= RUNS) break
    }
    const seconds = (Date.now() - started) / 1000
    await Promise.all(runners.map((r) => r.stop()))
    return { runsPerSecond: RUNS / seconds, seconds }
  } finally {
    await b.drop()
  }
}

export async function run(): Promise<void> {
  const baseline = await baselineUpdatesPerSecond(16, 3)
  console.log(`baseline: ${baseline.toFixed(0)} durable single-row UPDATEs/s over 16 connections`)
  const one = await measure(1)
  console.log(`throughput (1 instance): ${one.runsPerSecond.toFixed(0)} runs/s (${RUNS} runs in ${one.seconds.toFixed(2)} s)`)
  await saveResult('throughput', {
    value: Math.round(one.runsPerSecond),
    unit: 'runs/s',
    baseline: Math.round(baseline),
    ratio: one.runsPerSecond / baseline,
    target: '>= 1000 runs/s on one instance',
    met: one.runsPerSecond >= 1000,
  })
  const three = await measure(3)
  console.log(`throughput (3 instances): ${three.runsPerSecond.toFixed(0)} runs/s`)
  await saveResult('throughput3', {
    value: Math.round(three.runsPerSecond),
    unit: 'runs/s',
    baseline: Math.round(baseline),
    ratio: three.runsPerSecond / baseline,
    target: 'reported beside one instance',
    met: true,
  })
}

if (import.meta.url === `file://${process.argv[1]}`) {
  run().then(
    () => process.exit(0),
    (err) => {
      console.error(err)
      process.exit(1)
    },
  )
}
