/**
 * Showtime: the top of the hour with every stage live, on one instance of the
 * real server (buildApp through loadConfig, runner co-hosted, defaults; this
 * process takes `npm start`'s node flags from `npm run bench`).
 *
 * SHOWTIME_SHOWS (2,000) runs due at one instant, 20 scopes per definition
 * (100 definitions), each: core.log → core.webhook (a receiver answering in
 * 15 ms) → core.cue → core.wait 2 s → core.cue → core.webhook → an ending
 * core.log. Ten operators on graphql-ws `waitingStepChanges(mine: true)`, as
 * the console's inbox follows cues, answer the cues they
 * own (definition n belongs to operator n mod 10) with `resolveCue`, four
 * answers in flight each; one cue in ten is answered again by the next
 * operator, who must get `applied: false`. SHOWTIME_DASHBOARDS (40) dashboards
 * watch `runChanges`. Everyone but the server is in bench/showtimeClients.ts,
 * another process. A handful of shows (SHOWTIME_IDLE_SHOWS, 20) runs first on
 * the same instance with the same clients, and every figure is printed beside
 * its idle value, so a ratio survives a noisy machine.
 *
 * Then, on the same instance: SHOWTIME_BURST_ANSWERS (4,000) answers offered
 * at once, each on its own connection, over half as many parked cues (every
 * cue answered twice): each must be answered or refused BUSY with HTTP 503 and
 * Retry-After, none lost, no socket error. Last the hostile subscriber:
 * SHOWTIME_TICKERS (100) definitions firing every second, measured for
 * SHOWTIME_HOSTILE_SECONDS (20) without and then with a viewer holding
 * runChanges subscriptions 100 per socket on SHOWTIME_HOSTILE_SOCKETS (10)
 * sockets: due-run start lag and MISSED count (past SUBSCRIPTIONS_PER_PRINCIPAL
 * the viewer's subscriptions are refused; the refusals are counted).
 * SUBSCRIPTIONS_PER_PRINCIPAL, SUBSCRIPTIONS_PER_INSTANCE,
 * FANOUT_DELIVERIES_PER_POLL, the runner's settings, GRAPHQL_MAX_IN_FLIGHT and
 * HTTP_ACCEPT_LISTENERS set here are passed to the server, to compare a
 * run without the fan-out's bounds.
 *
 * "Instant → last completed" is printed raw, but most of it at full scale is
 * the ten simulated operators' own queue (four answers in flight each, some
 * 4,400 answers), not the system. So each run's answering time is measured:
 * for each of its two cues, from the moment its owner's inbox subscription
 * delivered the cue to the moment the owner first sent the answer (the
 * operator's queue included; a resend after BUSY is the server's time, not
 * the person's). The target row is, per run, ended_at − the instant − that
 * answering time, its p99 and max held to 1.1 × the program's own length (the
 * 2 s wait and the two webhooks' 15 ms answers: 2,233 ms).
 *
 * SHOWTIME_TOPOLOGIES (single,split,three) picks what runs: `single` is all of
 * the above on one instance in this process; `split` (API-only instances in
 * front of one runner instance) and `three` (three full instances) run only
 * the loaded show, each server in its own process (bench/showtimeScaleOut.ts),
 * into the `showtimeScaleOut` result beside the single instance's figures.
 *
 * Event-loop delay is perf_hooks.monitorEventLoopDelay in this process, which
 * is the server's (10 ms sampling; the figure is the delay beyond it).
 * Statements per run: the server's pools' own count, and MariaDB's server-wide
 * Questions delta (inflated by any other client of a shared MariaDB).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { type BenchResult, benchDb, globalStatus, printResults, runMain, saveResult, sleep } from './lib.ts'
import { serverDbStats } from './scheduled.ts'
import { BENCH_TOKENS, type BenchServer, startBenchServer } from './server.ts'
import {
  COMPLETION_FIGURES,
  figureRows,
  type PhaseFigures,
  phaseFigures,
  phaseParkTimes,
  phaseSteps,
  SERVING_FIGURES,
  TARGET,
  type TargetRow,
  TIMING_FIGURES,
  targetRow,
} from './showtimeFigures.ts'
import type { ClientsReport, Command } from './showtimeMessages.ts'
import {
  SCALE_OUT_TOPOLOGIES,
  type ScaleOutShow,
  scaleOutResult,
  scaleOutRows,
  scaleOutShow,
} from './showtimeScaleOut.ts'
import {
  ANSWER_SLUG_PATTERN,
  ANSWERS_IN_FLIGHT,
  awaitShowFinished,
  ClientsProcess,
  OPERATOR_TOKENS,
  OPERATORS,
  SCOPES_PER_DEFINITION,
  SHOW_TOKENS,
  scheduleShow,
} from './showtimeSetup.ts'
import { burstPhase, hostilePhase } from './showtimeStress.ts'

const env = process.env

/** The fan-out's bounds, the runner's settings and the HTTP admission a show leans on, passed to the server when set here (to compare a run with other values). */
const PASSED_THROUGH = [
  'SUBSCRIPTIONS_PER_PRINCIPAL',
  'SUBSCRIPTIONS_PER_INSTANCE',
  'FANOUT_DELIVERIES_PER_POLL',
  'RUNNER_WAKE_BATCHES',
  'RUNNER_PARALLELISM',
  'RUNNER_DB_POOL_SIZE',
  'RUNNER_BATCH_SIZE',
  'GRAPHQL_MAX_IN_FLIGHT',
  'HTTP_ACCEPT_LISTENERS',
]
function passedThrough(): Record<string, string> {
  return Object.fromEntries(PASSED_THROUGH.flatMap((k) => (env[k] ? [[k, env[k] as string]] : [])))
}
const SHOWS = Number(env.SHOWTIME_SHOWS ?? 2000)
const IDLE_SHOWS = Number(env.SHOWTIME_IDLE_SHOWS ?? 20)
const DASHBOARDS = Number(env.SHOWTIME_DASHBOARDS ?? 40)
const AFTER_MS = Number(env.SHOWTIME_AFTER_MS ?? 60_000)
const LEAD_MS = Number(env.BENCH_LEAD_MS ?? Math.max(8000, SHOWS * 8))
const ELD_RESOLUTION_MS = 10
/**
 * What each operator subscribes to, by `SHOWTIME_INBOX`: `changes` (the
 * default), its own cues as changes, as the console's "Mine only" inbox
 * does; `mine`, its own cues sent whole on each change (`waitingSteps`);
 * `all`, everybody's inbox sent whole (the oldest 500 cues, whoever they
 * are for), as before cues had assignees.
 */
const INBOX_SUBSCRIPTIONS = {
  mine: 'waitingSteps(mine: true)',
  changes: 'waitingStepChanges(mine: true)',
  all: 'waitingSteps (everybody’s)',
} as const
const INBOX: keyof typeof INBOX_SUBSCRIPTIONS =
  env.SHOWTIME_INBOX === 'all' || env.SHOWTIME_INBOX === 'mine' ? env.SHOWTIME_INBOX : 'changes'
const nodeFlags = process.execArgv.filter((a, i, all) => a !== '--import' && all[i - 1] !== '--import')

/** The runner's passes so far: how many, and their total seconds (the tick-duration histogram). */
async function passTotals(s: BenchServer): Promise<{ count: number; sum: number }> {
  const metric = await s.app.metrics.tickDuration.get()
  const value = (name: string) => metric.values.find((v) => v.metricName === name)?.value ?? 0
  return { count: value(`${metric.name}_count`), sum: value(`${metric.name}_sum`) }
}

interface Phase {
  figures: PhaseFigures
  eldP99Ms: number
  eldMaxMs: number
  /** The clients' process's own event-loop delay over the phase (see ClientsReport). */
  clientEld: { p99Ms: number; maxMs: number }
  statementsPerRun: number
  roundTripsPerRun: number
  questionsPerRun: number
  comPerRun: Record<string, number>
  rssPeakMb: number
  runnerPasses: number
  runnerPassMeanMs: number | null
  window: { from: number; to: number }
}

const mb = (bytes: number) => Math.round(bytes / 2 ** 20)
/** Where the resident memory is: V8's heap (committed, live), external and array buffers, in MB. */
function memorySplit(m: NodeJS.MemoryUsage = process.memoryUsage()) {
  return {
    rss: mb(m.rss),
    heapTotal: mb(m.heapTotal),
    heapUsed: mb(m.heapUsed),
    external: mb(m.external),
    arrayBuffers: mb(m.arrayBuffers),
  }
}
const COM = ['Com_select', 'Com_insert', 'Com_update', 'Com_delete', 'Com_commit'] as const

/** The single instance, in this process: idle, loaded, burst and hostile phases. */
async function single(): Promise<{ results: Record<string, BenchResult>; loaded: PhaseFigures }> {
  const b = await benchDb(4)
  const clients = new ClientsProcess()
  let server: BenchServer | null = null
  const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS })
  eld.enable()
  let rssPeak = 0
  let splitAtPeak = memorySplit()
  const rssTimer = setInterval(() => {
    const m = process.memoryUsage()
    if (m.rss > rssPeak) {
      rssPeak = m.rss
      splitAtPeak = memorySplit(m)
    }
  }, 100)
  try {
    const { url: receiverUrl } = await clients.next<{ url: string }>('receiver', 30_000)
    server = await startBenchServer(b.url, {
      SHOWRUNNER_TOKENS: SHOW_TOKENS,
      WEBHOOK_ALLOW: receiverUrl,
      ...passedThrough(),
    })
    const s = server
    const connected = await clients.ask<{ subscribed: number; errors: string[] }>(
      {
        type: 'connect',
        wsUrls: [s.wsUrl],
        graphqlUrls: [s.graphqlUrl],
        healthUrls: [s.graphqlUrl.replace(/\/graphql$/, '/healthz')],
        operatorTokens: OPERATOR_TOKENS,
        viewerToken: BENCH_TOKENS.viewer,
        dashboards: DASHBOARDS,
        answersInFlight: ANSWERS_IN_FLIGHT,
        answerSlugPattern: ANSWER_SLUG_PATTERN,
        inbox: INBOX,
      },
      'connected',
    )
    console.log(
      `showtime: ${connected.subscribed} subscribers connected${connected.errors.length ? `; ${connected.errors}` : ''}`,
    )

    const phase = async (prefix: string, shows: number, leadMs: number): Promise<Phase> => {
      const passesBefore = await passTotals(s)
      const sentBefore = serverDbStats(s)
      const questionsBefore = await globalStatus('Questions')
      const comBefore = await Promise.all(COM.map(globalStatus))
      const { instant, defs } = await scheduleShow(s, s.app.db, { prefix, shows, leadMs, receiverUrl })
      await sleep(instant.getTime() - Date.now())
      eld.reset()
      clients.child.send({ type: 'instant' } satisfies Command)
      rssPeak = process.memoryUsage().rss
      await awaitShowFinished(s.app.db, defs, shows)
      const to = Date.now()
      const passesAfter = await passTotals(s)
      const passes = passesAfter.count - passesBefore.count
      const eldP99Ms = Math.max(0, eld.percentile(99) / 1e6 - ELD_RESOLUTION_MS)
      const eldMaxMs = Math.max(0, eld.max / 1e6 - ELD_RESOLUTION_MS)
      const peak = rssPeak
      const sentAfter = serverDbStats(s)
      const statements = sentAfter.statements - sentBefore.statements
      const roundTrips = sentAfter.roundTrips - sentBefore.roundTrips
      const questions = (await globalStatus('Questions')) - questionsBefore
      const comAfter = await Promise.all(COM.map(globalStatus))
      const report = await clients.ask<ClientsReport>({ type: 'report' }, 'report')
      const window = { from: instant.getTime(), to }
      const figures = phaseFigures(
        await phaseSteps(b.db, defs.from, defs.to),
        report,
        window,
        await phaseParkTimes(b.db, defs.from, defs.to),
      )
      return {
        figures,
        eldP99Ms: Math.round(eldP99Ms),
        eldMaxMs: Math.round(eldMaxMs),
        clientEld: report.eld,
        statementsPerRun: Math.round((statements / shows) * 100) / 100,
        roundTripsPerRun: Math.round((roundTrips / shows) * 100) / 100,
        questionsPerRun: Math.round((questions / shows) * 100) / 100,
        comPerRun: Object.fromEntries(
          COM.map((c, i) => [
            c,
            Math.round((((comAfter[i] as number) - (comBefore[i] as number)) / shows) * 100) / 100,
          ]),
        ),
        rssPeakMb: mb(peak),
        runnerPasses: passes,
        runnerPassMeanMs:
          passes > 0 ? Math.round(((passesAfter.sum - passesBefore.sum) * 1000) / passes) : null,
        window,
      }
    }

    // 1. A handful of shows on the idle instance, then the full show.
    const idle = await phase('idle-', IDLE_SHOWS, 4000)
    const rssIdle = process.memoryUsage().rss
    const splitIdle = memorySplit()
    console.log(`showtime: idle phase done (${IDLE_SHOWS} shows), RSS ${mb(rssIdle)} MB`)
    const loaded = await phase('show-', SHOWS, LEAD_MS)
    console.log(`showtime: loaded phase done (${SHOWS} shows); RSS after in ${AFTER_MS / 1000} s`)
    await sleep(AFTER_MS)
    const rssAfter = process.memoryUsage().rss
    const memory: Record<string, ReturnType<typeof memorySplit>> = {
      idle: splitIdle,
      peak: splitAtPeak,
      after: memorySplit(),
    }
    // A diagnosis, not a figure: what a full collection leaves tells live memory (ours) from a grown heap (V8's).
    if (env.SHOWTIME_GC_PROBE) {
      setFlagsFromString('--expose-gc')
      ;(runInNewContext('gc') as () => void)()
      memory.afterFullGc = memorySplit()
    }
    console.log(`showtime: memory (MB) ${JSON.stringify(memory)}`)
    const clientsReport = await clients.ask<ClientsReport>({ type: 'report' }, 'report')
    const keys = clientsReport.receiverKeys
    const distinctKeys = new Set(keys).size
    const webhooksExpected = 2 * (IDLE_SHOWS + SHOWS)

    // 2. The burst of answers at once.
    const burst = await burstPhase(s, clients)
    // 3. The hostile subscriber beside per-second schedules.
    const hostile = await hostilePhase(s, clients)

    const f = (p: Phase) => p.figures
    const rows: TargetRow[] = [
      ...figureRows(TIMING_FIGURES, f(idle), f(loaded)),
      targetRow('event-loop delay p99 (ms)', idle.eldP99Ms, loaded.eldP99Ms, TARGET.eldP99),
      targetRow('event-loop delay max (ms)', idle.eldMaxMs, loaded.eldMaxMs, null),
      // The clients stamp what they receive on their own clock: their lag is in every "→ owner" figure.
      targetRow("clients' event-loop delay p99 (ms)", idle.clientEld.p99Ms, loaded.clientEld.p99Ms, null),
      targetRow("clients' event-loop delay max (ms)", idle.clientEld.maxMs, loaded.clientEld.maxMs, null),
      ...figureRows(SERVING_FIGURES, f(idle), f(loaded)),
      targetRow(
        'RSS peak (MB)',
        mb(rssIdle),
        loaded.rssPeakMb,
        Math.round(2.5 * mb(rssIdle)),
        '<= 2.5 x idle',
      ),
      targetRow(
        'RSS a minute after (MB)',
        mb(rssIdle),
        mb(rssAfter),
        Math.round(1.2 * mb(rssIdle)),
        '<= 1.2 x idle',
      ),
      targetRow(
        'runner pass, mean (ms)',
        idle.runnerPassMeanMs ?? Number.NaN,
        loaded.runnerPassMeanMs ?? Number.NaN,
        null,
      ),
      targetRow('statements per run (server pools)', idle.statementsPerRun, loaded.statementsPerRun, null),
      targetRow('round trips per run (server pools)', idle.roundTripsPerRun, loaded.roundTripsPerRun, null),
      targetRow(
        'Questions per run (MariaDB, server-wide)',
        idle.questionsPerRun,
        loaded.questionsPerRun,
        null,
      ),
      ...figureRows(COMPLETION_FIGURES, f(idle), f(loaded)),
    ]
    const correct =
      f(loaded).completed === SHOWS &&
      f(idle).completed === IDLE_SHOWS &&
      f(loaded).answeredTwice === 0 &&
      f(loaded).secondAnswersApplied === 0 &&
      f(loaded).cuesNeverSeenByOwner === 0 &&
      distinctKeys === webhooksExpected &&
      keys.length === webhooksExpected
    console.log(
      `\nshowtime: ${SHOWS} shows, ${DASHBOARDS} dashboards, ${OPERATORS} operators (idle: ${IDLE_SHOWS} shows)`,
    )
    console.table(rows)
    console.log(
      `showtime: correctness: ${f(loaded).completed}/${SHOWS} completed, ${f(loaded).answeredTwice} cues applied twice, ` +
        `${f(loaded).secondAnswers} second answers (${f(loaded).secondAnswersApplied} wrongly applied, ${f(loaded).secondAnswersRefused} refused busy or lost and sent again), ` +
        `${f(loaded).cuesNeverSeenByOwner} cues never seen by their owner, webhooks ${keys.length} (${distinctKeys} distinct keys) of ${webhooksExpected}`,
    )
    const settings = {
      WEBHOOK_ALLOW: 'the local receiver',
      SHOWRUNNER_TOKENS: 'admin, viewer, 10 named operators (each the assignee of its shows’ cues)',
      inbox: INBOX_SUBSCRIPTIONS[INBOX],
      ...passedThrough(),
    }
    const scale = {
      shows: SHOWS,
      idleShows: IDLE_SHOWS,
      definitions: Math.ceil(SHOWS / SCOPES_PER_DEFINITION),
      dashboards: DASHBOARDS,
      operators: OPERATORS,
      answersInFlight: ANSWERS_IN_FLIGHT,
    }
    const targeted = rows.filter((r) => r.met !== '—')
    const showtime: BenchResult = {
      value: f(loaded).goToNextMs.p99,
      unit: 'ms (GO → next step p99, loaded)',
      baseline: f(idle).goToNextMs.p99,
      ratio: f(idle).goToNextMs.p99 > 0 ? f(loaded).goToNextMs.p99 / f(idle).goToNextMs.p99 : null,
      target:
        'GO → next p99 <= 100 ms; wait overshoot p99 <= 100 ms; cue → owner p99 <= 250 ms; /healthz p99 <= 50 ms; event-loop delay p99 <= 50 ms; RSS peak <= 2.5x idle, after a minute <= 1.2x; per run end − instant − answering <= 1.1 x program; every run completed, no cue applied twice',
      met: correct && targeted.every((r) => r.met === true),
      detail: {
        scale,
        settings,
        nodeFlags,
        targets: rows,
        missed: targeted.filter((r) => r.met !== true).map((r) => r.figure),
        idle: { ...idle, comPerRun: idle.comPerRun },
        loaded,
        rssIdleMb: mb(rssIdle),
        rssAfterMb: mb(rssAfter),
        afterMs: AFTER_MS,
        memoryMb: memory,
        webhooks: { received: keys.length, distinctKeys, expected: webhooksExpected },
        clientsRssMb: Math.round(clientsReport.rssMb),
        clientErrors: clientsReport.errors.slice(0, 10),
        eventLoopDelay: `perf_hooks.monitorEventLoopDelay in the server's process, ${ELD_RESOLUTION_MS} ms sampling subtracted`,
      },
    }
    return { results: { showtime, showtimeBurst: burst, showtimeHostile: hostile }, loaded: f(loaded) }
  } finally {
    clearInterval(rssTimer)
    eld.disable()
    clients.child.send({ type: 'finish' } satisfies Command)
    await Promise.race([new Promise((r) => clients.child.once('exit', r)), sleep(5000)])
    clients.child.kill()
    await server?.stop()
    await b.drop()
  }
}

/**
 * SHOWTIME_TOPOLOGIES (single,split,three): which to run. `single` is the
 * whole benchmark above; `split` and `three` the loaded show on more than one
 * instance (bench/showtimeScaleOut.ts), held beside the single's figures.
 */
export async function run(): Promise<Record<string, BenchResult>> {
  const asked = (env.SHOWTIME_TOPOLOGIES ?? 'single,split,three').split(',').map((t) => t.trim())
  const unknown = asked.filter(
    (t) => t !== 'single' && !(SCALE_OUT_TOPOLOGIES as readonly string[]).includes(t),
  )
  if (unknown.length > 0) throw new Error(`SHOWTIME_TOPOLOGIES: unknown ${unknown.join(', ')}`)
  const results: Record<string, BenchResult> = {}
  let loaded: PhaseFigures | null = null
  if (asked.includes('single')) {
    const one = await single()
    Object.assign(results, one.results)
    loaded = one.loaded
  }
  const shows: ScaleOutShow[] = []
  for (const topology of SCALE_OUT_TOPOLOGIES.filter((t) => asked.includes(t))) {
    const show = await scaleOutShow(topology, {
      shows: SHOWS,
      leadMs: LEAD_MS,
      dashboards: DASHBOARDS,
      inbox: INBOX,
      env: passedThrough(),
    })
    console.log(
      `showtime ${topology}: correctness: ${show.figures.completed}/${SHOWS} completed, ${show.figures.answeredTwice} cues applied twice, ` +
        `${show.figures.secondAnswersApplied} of ${show.figures.secondAnswers} second answers applied, ` +
        `${show.figures.cuesNeverSeenByOwner} cues never seen by their owner, webhooks ${show.webhooks.received} ` +
        `(${show.webhooks.distinctKeys} distinct keys) of ${show.webhooks.expected}`,
    )
    shows.push(show)
  }
  if (shows.length > 0) {
    console.log(
      `\nshowtime scale-out: ${SHOWS} shows, each topology beside the single instance's loaded figures`,
    )
    console.table(scaleOutRows(loaded, shows))
    results.showtimeScaleOut = scaleOutResult(loaded, shows)
  }
  for (const [name, r] of Object.entries(results)) await saveResult(name, r)
  return results
}

runMain(import.meta.url, async () => printResults(await run()))
