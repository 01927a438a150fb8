/**
 * `npm run bench`: every benchmark, one at a time (the machine has two cores),
 * each in its own process so one's pools, caches and heap cannot colour the
 * next. Starts bench/results.json afresh, so a benchmark that fails leaves no
 * stale figure behind; prints the table at the end and exits non-zero if a
 * benchmark could not run (a target not met is a figure, not a crash).
 *
 * Each benchmark hosts the server in its own process, so that process gets
 * node's flags from `npm start`'s script (`--no-memory-reducer`, see
 * docs/performance.md); run alone, give them yourself:
 * `node --no-memory-reducer --import tsx bench/punctuality.ts`.
 *
 * Alone: `npx tsx bench/throughput.ts` (also the graphile-worker peer),
 * `bench/burst.ts` (also its graphile-worker peer), `bench/punctuality.ts`,
 * `bench/starvation.ts`, `bench/fanout.ts`, `bench/apiLatency.ts`, `bench/console.ts`,
 * `bench/consoleLoad.ts`, `bench/history.ts`, `bench/showtime.ts`, `bench/notifications.ts`, `bench/galera.ts` (which starts the three-node
 * cluster of test/galera/cluster.sh). bench/README.md says what each measures.
 */
import { spawn } from 'node:child_process'
import { rm } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { printResults, RESULTS_FILE, readResults, startScriptNodeFlags } from './lib.ts'

const BENCHMARKS = [
  'writesPerRun',
  'throughput',
  'burst',
  'punctuality',
  'starvation',
  'fanout',
  'apiLatency',
  'showtime',
  'notifications',
  'console',
  'consoleLoad',
  'history',
  'galera',
] as const

function runOne(name: string, nodeFlags: readonly string[]): Promise<number> {
  const file = fileURLToPath(new URL(`./${name}.ts`, import.meta.url))
  const child = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', file], { stdio: 'inherit' })
  return new Promise((resolve) => child.on('close', (code) => resolve(code ?? 1)))
}

async function main(): Promise<void> {
  const started = Date.now()
  await rm(RESULTS_FILE, { force: true })
  const failed: string[] = []
  const nodeFlags = startScriptNodeFlags()
  console.log(`node flags from npm start's script: ${nodeFlags.join(' ') || '(none)'}`)
  for (const name of BENCHMARKS) {
    const t0 = Date.now()
    console.log(`\n== ${name}`)
    const code = await runOne(name, nodeFlags)
    console.log(
      `== ${name}: ${code === 0 ? 'done' : `FAILED (exit ${code})`} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
    )
    if (code !== 0) failed.push(name)
  }
  const results = await readResults()
  console.log(`\nbench/results.json (${((Date.now() - started) / 1000).toFixed(1)} s in all):`)
  printResults(results)
  const unmet = Object.entries(results).filter(([, r]) => !r.met)
  if (unmet.length > 0) console.log(`targets not met: ${unmet.map(([n]) => n).join(', ')}`)
  if (failed.length > 0) {
    console.error(`benchmarks that could not run: ${failed.join(', ')}`)
    process.exitCode = 1
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
