/**
 * Subscription fan-out: 2,000 graphql-ws subscribers (one connection each, in a
 * child process: bench/fanoutClients.ts) over 200 runs, 10 per run, while those
 * runs change status: each is paused, resumed, paused again and cancelled, the
 * 200 runs spread evenly over 2 s per round, through the run controls on the
 * bench's own pool (an operator elsewhere; the server is API-only, RUNNER=off,
 * so every statement its pool sends during the rounds is a status poll).
 *
 * Figures: status queries per poll interval (the contract: one poller per process, so
 * ≤ 1), delay from a transition (its `updatedAt`) to its delivery at p50 / p99,
 * and the server's RSS. Baseline: the poll interval itself (STATUS_POLL_MS,
 * default 500 ms), the floor a polled subscription cannot beat; target p99 ≤
 * interval + 100 ms.
 */
import { type ChildProcess, fork } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { cancelRun, pauseRun, resumeRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { defineCueEvent, driveUntilParked, materialiseRuns } from './fixtures.ts'
import {
  type BenchResult,
  benchDb,
  globalStatus,
  maxOf,
  percentile,
  printResults,
  runMain,
  saveResult,
  sleep,
} from './lib.ts'
import { BENCH_VIEWER_TOKENS, startBenchServer } from './server.ts'

const RUNS = Number(process.env.BENCH_FANOUT_RUNS ?? 200)
const SUBSCRIBERS = Number(process.env.BENCH_SUBSCRIBERS ?? 2000)
const POLL_MS = Number(process.env.STATUS_POLL_MS ?? 500)
const ROUND_MS = 2000
const ROUNDS = ['pause', 'resume', 'pause', 'cancel'] as const

interface Report {
  type: 'report'
  subscribers: number
  subscribed: number
  events: number
  completed: number
  delays: number[]
  statusesSeen: Record<string, number>
  errors: number
  firstErrors: string[]
  rssMb: number
}

function waitFor<T>(child: ChildProcess, type: string, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`fan-out clients: no "${type}" within ${timeoutMs} ms`)),
      timeoutMs,
    )
    const onMessage = (msg: { type?: string; error?: string }) => {
      if (msg?.type === 'failed') {
        clearTimeout(timer)
        reject(new Error(`fan-out clients failed: ${msg.error}`))
      } else if (msg?.type === type) {
        clearTimeout(timer)
        child.off('message', onMessage)
        resolve(msg as T)
      }
    }
    child.on('message', onMessage)
  })
}

export async function run(): Promise<Record<string, BenchResult>> {
  const b = await benchDb(10)
  let child: ChildProcess | null = null
  try {
    const def = await defineCueEvent(b.db, { slug: 'fanout' })
    const runIds = await materialiseRuns(b.db, def, RUNS, { at: new Date(Date.now() - 1000), prefix: 'room' })
    await driveUntilParked(b.db, def, RUNS)

    const server = await startBenchServer(b.url, { RUNNER: 'off', STATUS_POLL_MS: String(POLL_MS) })
    try {
      const rssIdle = process.memoryUsage().rss
      child = fork(fileURLToPath(new URL('./fanoutClients.ts', import.meta.url)), [], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      })
      const ready = waitFor<{ connectMs: number; subscribed: number; errors: string[] }>(
        child,
        'ready',
        120_000,
      )
      child.send({
        type: 'start',
        wsUrl: server.wsUrl,
        tokens: BENCH_VIEWER_TOKENS,
        runIds,
        perRun: Math.round(SUBSCRIBERS / RUNS),
      })
      const { connectMs, subscribed, errors } = await ready
      console.log(
        `fanout: ${subscribed} subscribers connected in ${connectMs} ms${errors.length ? `; errors: ${errors}` : ''}`,
      )
      if (subscribed < SUBSCRIBERS)
        throw new Error(`only ${subscribed} of ${SUBSCRIBERS} subscriptions started`)

      // The measured window: the status rounds.
      let rssPeak = process.memoryUsage().rss
      const rssTimer = setInterval(() => {
        rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
      }, 100)
      const statementsBefore = server.app.db.stats.statements
      const pollsBefore = server.app.poller.polls
      const comSelectBefore = await globalStatus('Com_select')
      const windowStart = Date.now()
      const deps = { db: b.db, clock: systemClock }
      for (const action of ROUNDS) {
        const roundStart = Date.now()
        for (let i = 0; i < runIds.length; i++) {
          const due = roundStart + (i * ROUND_MS) / runIds.length
          const wait = due - Date.now()
          if (wait > 0) await sleep(wait)
          const id = runIds[i] as number
          if (action === 'pause') await pauseRun(deps, id, 'bench')
          else if (action === 'resume') await resumeRun(deps, id, 'bench')
          else await cancelRun(deps, id, 'bench', 'fan-out benchmark over')
        }
        const rest = roundStart + ROUND_MS - Date.now()
        if (rest > 0) await sleep(rest)
      }
      // Let the last transitions be polled and delivered.
      await sleep(POLL_MS * 2 + 200)
      const windowMs = Date.now() - windowStart
      const statements = server.app.db.stats.statements - statementsBefore
      const polls = server.app.poller.polls - pollsBefore
      const comSelect = (await globalStatus('Com_select')) - comSelectBefore
      clearInterval(rssTimer)

      const reportP = waitFor<Report>(child, 'report', 60_000)
      child.send({ type: 'finish' })
      const report = await reportP
      await once(child, 'exit').catch(() => {})
      child = null

      const intervals = windowMs / POLL_MS
      const queriesPerInterval = statements / intervals
      const p50 = percentile(report.delays, 50)
      const p99 = percentile(report.delays, 99)
      const expected = SUBSCRIBERS * ROUNDS.length
      console.log(
        `fanout: ${report.events}/${expected} deliveries, delay p50 ${p50} ms p99 ${p99} ms; ` +
          `${statements} server statements (${polls} polls) in ${windowMs} ms = ${queriesPerInterval.toFixed(2)} per ${POLL_MS} ms; ` +
          `server RSS ${(rssPeak / 2 ** 20).toFixed(0)} MiB`,
      )
      const result: BenchResult = {
        value: p99,
        unit: 'ms (p99 transition → delivery)',
        baseline: POLL_MS,
        ratio: p99 / POLL_MS,
        target: `p99 <= poll interval + 100 ms (${POLL_MS + 100} ms) and <= 1 status query per poll interval per process`,
        met:
          p99 <= POLL_MS + 100 &&
          queriesPerInterval <= 1 &&
          report.events === expected &&
          report.errors === 0,
        detail: {
          subscribers: SUBSCRIBERS,
          runs: RUNS,
          transitions: RUNS * ROUNDS.length,
          deliveries: report.events,
          deliveriesExpected: expected,
          completedSubscriptions: report.completed,
          errors: report.errors,
          firstErrors: report.firstErrors.join(' | '),
          delayP50Ms: p50,
          delayP99Ms: p99,
          delayMaxMs: maxOf(report.delays),
          pollIntervalMs: POLL_MS,
          statusQueriesPerPollInterval: queriesPerInterval,
          serverStatementsInWindow: statements,
          pollsInWindow: polls,
          windowMs,
          // Server-wide: includes the bench's own control reads and any other client of MariaDB.
          comSelectDeltaServerWide: comSelect,
          serverRssIdleMb: rssIdle / 2 ** 20,
          serverRssPeakMb: rssPeak / 2 ** 20,
          serverRssPerSubscriberKb: (rssPeak - rssIdle) / 1024 / SUBSCRIBERS,
          clientsRssMb: report.rssMb,
          connectMs,
          baselineUnit: 'the poll interval (STATUS_POLL_MS): the floor of a polled delivery',
        },
      }
      await saveResult('fanout', result)
      return { fanout: result }
    } finally {
      const stopping = Date.now()
      await server.stop()
      if (process.env.BENCH_DEBUG) console.log(`fanout: server stopped in ${Date.now() - stopping} ms`)
    }
  } finally {
    child?.kill()
    await b.drop()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
