/**
 * Starvation: 10,000 runs parked on cues (older than anything new, made by the
 * real runner) plus 100 newly due runs (half with a free concurrency key, half
 * without): the time from "due" until all 100 are RUNNING, with a runner at the
 * production tick (TICK_MS, default 1000 ms) and default batch settings.
 *
 * Worst case on purpose: the 100 runs become due right after a tick finished, so
 * they wait out almost a whole tick before the next one can see them. Baseline,
 * from the same run: the same measure on the same database before the crowd
 * exists. Target: ≤ 2 × TICK_MS with the crowd.
 */
import type { Db } from '../sql/db.ts'
import type { DefinitionRow } from '../sql/eventDefinitions.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { defineCueEvent, driveUntilParked, materialiseRuns, parkedCount } from './fixtures.ts'
import { type BenchResult, benchDb, printResults, runMain, saveResult, sleep } from './lib.ts'

const TICK_MS = Number(process.env.TICK_MS ?? 1000)
const PARKED = Number(process.env.BENCH_PARKED ?? 10_000)
const NEW_RUNS = 100
const TRIALS = 3

interface Trial {
  /** From the moment the runs were due to the moment all of them were RUNNING. */
  ms: number
}

async function allRunning(db: Db, ids: number[]): Promise<boolean> {
  const [row] = await db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'running' AND id IN (${ids.map(() => '?').join(',')})`,
    ids,
  )
  return Number(row?.n) === ids.length
}

/** Wait until the runner finishes a tick (bounded), so new work just missed it. */
async function afterTick(runner: Runner): Promise<void> {
  const seen = runner.lastTick?.getTime() ?? 0
  const deadline = Date.now() + 10 * TICK_MS
  while ((runner.lastTick?.getTime() ?? 0) === seen && Date.now() < deadline) await sleep(1)
}

async function trials(db: Db, runner: Runner, defs: DefinitionRow[], label: string): Promise<Trial[]> {
  const out: Trial[] = []
  for (let t = 0; t < TRIALS; t++) {
    await afterTick(runner)
    const due = new Date()
    const ids: number[] = []
    for (const def of defs) {
      ids.push(
        ...(await materialiseRuns(db, def, NEW_RUNS / defs.length, { at: due, prefix: `${label}${t}-` })),
      )
    }
    const deadline = due.getTime() + 20 * TICK_MS
    while (!(await allRunning(db, ids))) {
      if (Date.now() > deadline) throw new Error(`${label}: new runs not RUNNING after ${20 * TICK_MS} ms`)
      await sleep(5)
    }
    out.push({ ms: Date.now() - due.getTime() })
  }
  return out
}

function tickRunner(db: Db, name: string): Runner {
  // Production settings: the configured tick, default batch size and parallelism.
  return new Runner({
    db,
    registry: createDefaultRegistry(),
    tickMs: TICK_MS,
    leaseMs: 30_000,
    instanceId: name,
  })
}

export async function run(): Promise<Record<string, BenchResult>> {
  const b = await benchDb(10)
  try {
    const crowd = await defineCueEvent(b.db, { slug: 'crowd' })
    const fresh = await defineCueEvent(b.db, { slug: 'fresh' })
    const keyed = await defineCueEvent(b.db, { slug: 'keyed', concurrencyKey: 'room:{{run.scope}}' })

    // Baseline: nobody parked yet.
    let runner = tickRunner(b.open(10), 'starve-baseline')
    runner.start()
    const baseline = await trials(b.db, runner, [fresh, keyed], 'base')
    await runner.stop()

    // The crowd: older than anything new, walked to its cue by the runner.
    const crowdAt = new Date(Date.now() - 3600_000)
    await materialiseRuns(b.db, crowd, PARKED, { at: crowdAt, prefix: 'c' })
    const setupMs = await driveUntilParked(b.db, crowd, PARKED)
    const parked = await parkedCount(b.db, crowd.id)
    console.log(`starvation: ${parked} runs parked on cues in ${setupMs} ms`)

    runner = tickRunner(b.open(10), 'starve')
    runner.start()
    const withCrowd = await trials(b.db, runner, [fresh, keyed], 'new')
    await runner.stop()

    // The crowd was left alone: no lease, still parked, no wake time.
    const [touched] = await b.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ?
          AND (claimed_by IS NOT NULL OR status <> 'running' OR wake_at IS NOT NULL)`,
      [crowd.id],
    )
    const worst = Math.max(...withCrowd.map((t) => t.ms))
    const baseWorst = Math.max(...baseline.map((t) => t.ms))
    console.log(
      `starvation: ${NEW_RUNS} new runs RUNNING after ${withCrowd.map((t) => t.ms).join(', ')} ms ` +
        `(baseline without the crowd ${baseline.map((t) => t.ms).join(', ')} ms; TICK_MS ${TICK_MS})`,
    )
    const result: BenchResult = {
      value: worst,
      unit: 'ms',
      baseline: baseWorst,
      ratio: worst / baseWorst,
      target: `<= 2 x TICK_MS (${2 * TICK_MS} ms)`,
      met: worst <= 2 * TICK_MS && Number(touched?.n) === 0,
      detail: {
        tickMs: TICK_MS,
        parked,
        newRuns: NEW_RUNS,
        newRunsKeyed: NEW_RUNS / 2,
        trialsMs: withCrowd.map((t) => t.ms),
        baselineTrialsMs: baseline.map((t) => t.ms),
        crowdTouched: Number(touched?.n),
        crowdSetupMs: setupMs,
        baselineUnit: 'same measure, same database, before the 10,000 parked runs existed',
      },
    }
    await saveResult('starvation', result)
    return { starvation: result }
  } finally {
    await b.drop()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
