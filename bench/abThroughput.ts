/**
 * The throughput round of two work trees, taken in turn: this checkout's and
 * another's (`AB_OTHER_TREE`, say an older commit checked out with `git
 * worktree add`, its node_modules linked to this one's). Each side keeps a
 * process of its own for the whole comparison, running its own
 * `bench/throughput.ts` `measure` with that tree's own benchmark settings (for
 * this one, the defaults), so one side's compiled code and caches never serve
 * the other. One unmeasured warm-up round each, then AB_PAIRS (5) pairs, the
 * order alternating (other first, then this first), each round AB_RUNS
 * (60,000) runs due at one instant; prints every round and each side's medians
 * of runs/s and of CPU per run (the runner process and MariaDB, from the
 * instant until every run is terminal).
 *
 * It answers "what did a change do to the database's work per run" on one
 * machine in one hour, where a figure from another machine or another day is
 * not comparable. Not part of `npm run bench`: it needs the other tree.
 *
 *   git worktree add /tmp/before <commit> && ln -s "$PWD/node_modules" /tmp/before/
 *   AB_OTHER_TREE=/tmp/before npx tsx bench/abThroughput.ts
 *
 * The other tree's `measure` may take the run count as its second argument or
 * read BENCH_RUNS (older trees); both are given.
 */
import { spawn } from 'node:child_process'
import { dirname, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { median, runMain } from './lib.ts'

const RUNS = Number(process.env.AB_RUNS ?? 60_000)
const PAIRS = Math.max(1, Number(process.env.AB_PAIRS ?? 5))
/** Materialising 60,000 runs took an older tree up to 10 s here; the lead leaves room for a slow hour. */
const LEAD_MS = process.env.BENCH_LEAD_MS ?? '25000'
const THIS_TREE = resolve(dirname(fileURLToPath(import.meta.url)), '..')

interface Round {
  runsPerSecond: number
  failed: number
  cpuPerRun: { runnerUs: number; databaseUs: number | null }
}

interface Side {
  name: string
  round(): Promise<Round>
  stop(): void
}

/** A child process serving one tree: one round per line it reads, one JSON line per round it prints. */
async function childMain(): Promise<void> {
  const tree = process.env.AB_TREE
  if (!tree) throw new Error('AB_TREE is not set')
  const { measure } = await import(resolve(tree, 'bench/throughput.ts'))
  console.log(JSON.stringify({ ready: true }))
  for await (const _line of createInterface({ input: process.stdin })) {
    const m = await measure(1, RUNS)
    console.log(JSON.stringify({ round: m }))
  }
}

function startSide(name: string, tree: string): Promise<Side> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child'], {
    cwd: tree,
    env: { ...process.env, AB_TREE: tree, BENCH_RUNS: String(RUNS), BENCH_LEAD_MS: LEAD_MS },
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const waiting: Array<{ resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void }> = []
  // Anything else the tree prints (its log lines) is passed through, not parsed.
  createInterface({ input: child.stdout }).on('line', (line) => {
    if (!line.startsWith('{"ready"') && !line.startsWith('{"round"'))
      return void console.log(`  ${name}: ${line}`)
    waiting.shift()?.resolve(JSON.parse(line))
  })
  child.on('exit', (code) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`the ${name} side's process ended (code ${code})`))
  })
  const next = () =>
    new Promise<Record<string, unknown>>((res, rej) => waiting.push({ resolve: res, reject: rej }))
  const ready = next()
  const side: Side = {
    name,
    async round() {
      const answer = next()
      child.stdin.write('go\n')
      return (await answer).round as Round
    },
    stop: () => child.kill('SIGTERM'),
  }
  return ready.then(() => side)
}

async function main(): Promise<void> {
  const otherTree = process.env.AB_OTHER_TREE
  if (!otherTree)
    throw new Error('set AB_OTHER_TREE to the other work tree (see the header of bench/abThroughput.ts)')
  const other = await startSide('other', resolve(otherTree))
  const ours = await startSide('this', THIS_TREE)
  const measured: Record<string, Round[]> = { other: [], this: [] }
  try {
    for (let pair = 0; pair <= PAIRS; pair++) {
      for (const side of pair % 2 === 0 ? [other, ours] : [ours, other]) {
        const r = await side.round()
        if (r.failed > 0) throw new Error(`the ${side.name} side: ${r.failed} runs did not complete`)
        console.log(
          `abThroughput: ${pair === 0 ? 'warm-up' : `pair ${pair}`} ${side.name}: ${r.runsPerSecond.toFixed(0)} runs/s, ` +
            `CPU per run: MariaDB ${r.cpuPerRun.databaseUs ?? 'n/a'} µs, runner ${r.cpuPerRun.runnerUs} µs`,
        )
        if (pair > 0) measured[side.name]?.push(r)
      }
    }
  } finally {
    other.stop()
    ours.stop()
  }
  for (const [name, rounds] of Object.entries(measured)) {
    const db = rounds.map((r) => r.cpuPerRun.databaseUs).filter((v): v is number => v !== null)
    console.log(
      `abThroughput: ${name} (${name === 'this' ? THIS_TREE : otherTree}), median of ${rounds.length} rounds of ${RUNS}: ` +
        `${median(rounds.map((r) => r.runsPerSecond)).toFixed(0)} runs/s, MariaDB ${db.length ? median(db) : 'n/a'} µs, ` +
        `runner ${median(rounds.map((r) => r.cpuPerRun.runnerUs))} µs per run`,
    )
  }
}

if (process.argv.includes('--child')) runMain(import.meta.url, childMain)
else runMain(import.meta.url, main)
