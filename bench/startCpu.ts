/**
 * The runner's own CPU per single-step run (`core.log`), started the way the
 * throughput benchmark's are: runs due now, started by runner ticks in start
 * transactions of START_CPU_BATCH (1,000). `process.cpuUsage()` (user + system
 * of this process only, so another process's load on the machine does not
 * count, only what it does to caches and frequency) around the ticks of each
 * round; the database's CPU is not in it. START_CPU_ROUNDS rounds (7) of
 * START_CPU_RUNS runs (4,000) after one unmeasured warm-up round; prints each
 * round and the median.
 *
 * It imports only what the runner has had for a while (Runner, materialiseMany,
 * the bench fixtures), so a copy runs on an older commit for an A/B taken in
 * turn: `npx tsx bench/startCpu.ts` in each worktree, alternately.
 */
import * as runs from '../sql/eventRuns/index.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { defineCueEvent } from './fixtures.ts'
import { benchDb, median, runMain } from './lib.ts'

const RUNS = Number(process.env.START_CPU_RUNS ?? 4000)
const ROUNDS = Number(process.env.START_CPU_ROUNDS ?? 7)
const BATCH = Number(process.env.START_CPU_BATCH ?? 1000)

async function main(): Promise<void> {
  const b = await benchDb(4)
  try {
    const def = await defineCueEvent(b.db, {
      slug: 'cpu',
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] },
    })
    const runner = new Runner({
      db: b.db,
      registry: createDefaultRegistry(),
      instanceId: 'cpu',
      batchSize: BATCH,
      startConcurrency: 1,
    })
    const perRun: number[] = []
    for (let round = 0; round <= ROUNDS; round++) {
      const due = new Date(Date.now() - 1000)
      const news = Array.from({ length: RUNS }, (_, i) => ({
        definitionId: def.id,
        versionId: def.currentVersionId as number,
        scope: `r${round}s${i}`,
        scheduledFor: due,
        timezone: 'UTC',
        concurrencyKey: null,
        startedBy: 'bench',
      }))
      for (let i = 0; i < news.length; i += 1000) await runs.materialiseMany(b.db, news.slice(i, i + 1000))
      const before = process.cpuUsage()
      let left = RUNS
      for (let tick = 0; left > 0 && tick < 100; tick++) {
        await runner.tick()
        const [row] = await b.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'scheduled'`,
        )
        left = Number(row?.n)
      }
      const used = process.cpuUsage(before)
      if (left > 0) throw new Error(`${left} runs still scheduled after 100 ticks`)
      const us = (used.user + used.system) / RUNS
      if (round > 0) perRun.push(us)
      console.log(`startCpu: round ${round}${round === 0 ? ' (warm-up)' : ''}: ${us.toFixed(2)} µs per run`)
    }
    console.log(
      `startCpu: median of ${ROUNDS}: ${median(perRun).toFixed(2)} µs of runner CPU per run (${RUNS} runs a round, batches of ${BATCH})`,
    )
  } finally {
    await b.drop()
  }
}

runMain(import.meta.url, main)
