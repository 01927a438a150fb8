/**
 * Showtime: the top of the hour with every stage live, on one instance of the
 * real server (buildApp through loadConfig, runner co-hosted, defaults; this
 * process takes `npm start`'s node flags from `npm run bench`).
 *
 * SHOWTIME_SHOWS (2,000) runs due at one instant, 20 scopes per definition
 * (100 definitions), each: core.log → core.webhook (a receiver answering in
 * 15 ms) → core.cue → core.wait 2 s → core.cue → core.webhook → an ending
 * core.log. Ten operators on graphql-ws `waitingSteps` answer the cues they
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
 * SUBSCRIPTIONS_PER_PRINCIPAL, SUBSCRIPTIONS_PER_INSTANCE and
 * FANOUT_DELIVERIES_PER_POLL set here are passed to the server, to compare a
 * run without the fan-out's bounds.
 *
 * Event-loop delay is perf_hooks.monitorEventLoopDelay in this process, which
 * is the server's (10 ms sampling; the figure is the delay beyond it).
 * Statements per run: the server's pools' own count, and MariaDB's server-wide
 * Questions delta (inflated by any other client of a shared MariaDB).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { type BenchResult, benchDb, globalStatus, printResults, runMain, saveResult, sleep } from './lib.ts'
import { BENCH_ADMIN_TOKEN, cronAt, instantAhead, serverStatements } from './scheduled.ts'
import { BENCH_TOKENS, type BenchServer, startBenchServer } from './server.ts'
import type { ClientsReport, Command } from './showtimeClients.ts'
import {
  type PhaseFigures,
  phaseFigures,
  phaseSteps,
  RECEIVER_MS,
  type TargetRow,
  targetRow,
  WAIT_MS,
} from './showtimeFigures.ts'
import { ClientsProcess, countRuns, createShows, PHASE_TIMEOUT_MS, until } from './showtimeSetup.ts'
import { burstPhase, hostilePhase } from './showtimeStress.ts'

const env = process.env

/** The fan-out's bounds, passed to the server when set here (to compare a run without them). */
const PASSED_THROUGH = [
  'SUBSCRIPTIONS_PER_PRINCIPAL',
  'SUBSCRIPTIONS_PER_INSTANCE',
  'FANOUT_DELIVERIES_PER_POLL',
]
function passedThrough(): Record<string, string> {
  return Object.fromEntries(PASSED_THROUGH.flatMap((k) => (env[k] ? [[k, env[k] as string]] : [])))
}
const SHOWS = Number(env.SHOWTIME_SHOWS ?? 2000)
const IDLE_SHOWS = Number(env.SHOWTIME_IDLE_SHOWS ?? 20)
const SCOPES_PER_DEFINITION = 20
const OPERATORS = 10
const ANSWERS_IN_FLIGHT = 4
const DASHBOARDS = Number(env.SHOWTIME_DASHBOARDS ?? 40)
const AFTER_MS = Number(env.SHOWTIME_AFTER_MS ?? 60_000)
const LEAD_MS = Number(env.BENCH_LEAD_MS ?? Math.max(8000, SHOWS * 8))
const ELD_RESOLUTION_MS = 10
const OPERATOR_TOKENS = Array.from(
  { length: OPERATORS },
  (_, i) => `bench-operator-${i}-token-0123456789abcdef`,
)
/** Operator i signs in as `op-i` and is the assignee of the cues of definitions numbered i mod 10. */
const operatorName = (i: number) => `op-${i}`
const TOKENS = [
  `admin:${BENCH_ADMIN_TOKEN}`,
  `viewer:${BENCH_TOKENS.viewer}`,
  ...OPERATOR_TOKENS.map((tok, i) => `operator:${operatorName(i)}=${tok}`),
].join(',')
/**
 * `mine` (the default): each operator subscribes to `waitingSteps(mine: true)`,
 * its own cues, as a stage manager's console does; `all`: everybody's inbox
 * (the oldest 500 cues, whoever they are for), as before cues had assignees.
 */
const INBOX = env.SHOWTIME_INBOX === 'all' ? 'all' : 'mine'
const nodeFlags = process.execArgv.filter((a, i, all) => a !== '--import' && all[i - 1] !== '--import')

const TARGET = { goP99: 100, overshootP99: 100, deliveredP99: 250, healthP99: 50, eldP99: 50 } as const

function showProgram(url: string, assignee: string) {
  const hook = (at: string) => ({
    kind: 'core.webhook',
    params: { url, method: 'POST', body: { room: '{{run.scope}}', at } },
  })
  return {
    phases: [
      {
        name: 'doors',
        steps: [{ kind: 'core.log', params: { message: 'doors open in {{run.scope}}' } }, hook('doors')],
      },
      {
        name: 'show',
        steps: [
          { kind: 'core.cue', params: { prompt: 'Curtain up in {{run.scope}}', assignee } },
          { kind: 'core.wait', params: { seconds: WAIT_MS / 1000 } },
          { kind: 'core.cue', params: { prompt: 'Curtain down in {{run.scope}}', assignee } },
          hook('curtain'),
        ],
      },
      {
        name: 'wrap-up',
        ending: true,
        steps: [{ kind: 'core.log', params: { message: 'wrap-up in {{run.scope}}' } }],
      },
    ],
  }
}

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
  statementsPerRun: number
  questionsPerRun: number
  comPerRun: Record<string, number>
  rssPeakMb: number
  runnerPasses: number
  runnerPassMeanMs: number | null
  window: { from: number; to: number }
}

const mb = (bytes: number) => Math.round(bytes / 2 ** 20)
const COM = ['Com_select', 'Com_insert', 'Com_update', 'Com_delete', 'Com_commit'] as const

export async function run(): Promise<Record<string, BenchResult>> {
  const b = await benchDb(4)
  const clients = new ClientsProcess()
  let server: BenchServer | null = null
  const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS })
  eld.enable()
  let rssPeak = 0
  const rssTimer = setInterval(() => {
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
  }, 100)
  try {
    const { url: receiverUrl } = await clients.next<{ url: string }>('receiver', 30_000)
    server = await startBenchServer(b.url, {
      SHOWRUNNER_TOKENS: TOKENS,
      WEBHOOK_ALLOW: receiverUrl,
      ...passedThrough(),
    })
    const s = server
    const connected = await clients.ask<{ subscribed: number; errors: string[] }>(
      {
        type: 'connect',
        wsUrl: s.wsUrl,
        graphqlUrl: s.graphqlUrl,
        healthUrl: s.graphqlUrl.replace(/\/graphql$/, '/healthz'),
        operatorTokens: OPERATOR_TOKENS,
        viewerToken: BENCH_TOKENS.viewer,
        dashboards: DASHBOARDS,
        answersInFlight: ANSWERS_IN_FLIGHT,
        answerSlugPattern: '^(?:idle|show)-(\\d+)$',
        inbox: INBOX,
      },
      'connected',
    )
    console.log(
      `showtime: ${connected.subscribed} subscribers connected${connected.errors.length ? `; ${connected.errors}` : ''}`,
    )

    const phase = async (prefix: string, shows: number, leadMs: number): Promise<Phase> => {
      const instant = instantAhead(leadMs)
      const passesBefore = await passTotals(s)
      const statementsBefore = serverStatements(s)
      const questionsBefore = await globalStatus('Questions')
      const comBefore = await Promise.all(COM.map(globalStatus))
      const defs = await createShows(s, {
        prefix,
        shows,
        perDefinition: SCOPES_PER_DEFINITION,
        schedule: cronAt(instant),
        program: (d: number) => showProgram(receiverUrl, operatorName(d % OPERATORS)),
      })
      await until(
        `${shows} runs materialised`,
        Math.max(0, instant.getTime() - Date.now() - 500),
        async () => ((await countRuns(s.app.db, defs)) >= shows ? true : null),
      ).catch((err) => {
        throw new Error(`${(err as Error).message}; raise BENCH_LEAD_MS`)
      })
      await sleep(instant.getTime() - Date.now())
      eld.reset()
      rssPeak = process.memoryUsage().rss
      await until(`${shows} shows finished`, PHASE_TIMEOUT_MS, async () =>
        (await countRuns(
          s.app.db,
          defs,
          `AND status IN ('scheduled','starting','running','paused','ending')`,
        )) === 0
          ? true
          : null,
      ).catch(async (err) => {
        // Say where the unfinished shows stand, so a timeout can be diagnosed.
        const stuck = await s.app.db.query<{ status: string; kind: string; stepStatus: string; n: number }>(
          `SELECT r.status, s.kind, s.status AS stepStatus, COUNT(*) AS n
             FROM event_runs r JOIN event_run_steps s ON s.run_id = r.id
            WHERE r.definition_id BETWEEN ? AND ? AND r.status NOT IN ('completed','failed','cancelled','missed')
              AND s.status IN ('running','pending') AND s.seq = (SELECT MIN(seq) FROM event_run_steps x
                WHERE x.run_id = r.id AND x.status IN ('running','pending'))
            GROUP BY 1, 2, 3`,
          [defs.from, defs.to],
        )
        throw new Error(`${(err as Error).message}; unfinished, by current step: ${JSON.stringify(stuck)}`)
      })
      const to = Date.now()
      const passesAfter = await passTotals(s)
      const passes = passesAfter.count - passesBefore.count
      const eldP99Ms = Math.max(0, eld.percentile(99) / 1e6 - ELD_RESOLUTION_MS)
      const eldMaxMs = Math.max(0, eld.max / 1e6 - ELD_RESOLUTION_MS)
      const peak = rssPeak
      const statements = serverStatements(s) - statementsBefore
      const questions = (await globalStatus('Questions')) - questionsBefore
      const comAfter = await Promise.all(COM.map(globalStatus))
      const report = await clients.ask<ClientsReport>({ type: 'report' }, 'report')
      const window = { from: instant.getTime(), to }
      const figures = phaseFigures(await phaseSteps(b.db, defs.from, defs.to), report, window)
      return {
        figures,
        eldP99Ms: Math.round(eldP99Ms),
        eldMaxMs: Math.round(eldMaxMs),
        statementsPerRun: Math.round((statements / shows) * 100) / 100,
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
    console.log(`showtime: idle phase done (${IDLE_SHOWS} shows), RSS ${mb(rssIdle)} MB`)
    const loaded = await phase('show-', SHOWS, LEAD_MS)
    console.log(`showtime: loaded phase done (${SHOWS} shows); RSS after in ${AFTER_MS / 1000} s`)
    await sleep(AFTER_MS)
    const rssAfter = process.memoryUsage().rss
    const clientsReport = await clients.ask<ClientsReport>({ type: 'report' }, 'report')
    const keys = clientsReport.receiverKeys
    const distinctKeys = new Set(keys).size
    const webhooksExpected = 2 * (IDLE_SHOWS + SHOWS)

    // 2. The burst of answers at once.
    const burst = await burstPhase(s, clients)
    // 3. The hostile subscriber beside per-second schedules.
    const hostile = await hostilePhase(s, clients)

    const f = (p: Phase) => p.figures
    const programMs = WAIT_MS + 2 * RECEIVER_MS
    const answeringMs = 2 * f(loaded).resolveCueMs.p50
    const lastLimit = Math.round(1.1 * (programMs + answeringMs))
    const rows: TargetRow[] = [
      targetRow('GO → next step p50 (ms)', f(idle).goToNextMs.p50, f(loaded).goToNextMs.p50, null),
      targetRow('GO → next step p99 (ms)', f(idle).goToNextMs.p99, f(loaded).goToNextMs.p99, TARGET.goP99),
      targetRow(
        '2 s wait overshoot p50 (ms)',
        f(idle).waitOvershootMs.p50,
        f(loaded).waitOvershootMs.p50,
        null,
      ),
      targetRow(
        '2 s wait overshoot p99 (ms)',
        f(idle).waitOvershootMs.p99,
        f(loaded).waitOvershootMs.p99,
        TARGET.overshootP99,
      ),
      targetRow(
        '2 s wait overshoot max (ms)',
        f(idle).waitOvershootMs.max,
        f(loaded).waitOvershootMs.max,
        null,
      ),
      targetRow(
        'cue parked → its owner p50 (ms)',
        f(idle).parkedToOwnerMs.p50,
        f(loaded).parkedToOwnerMs.p50,
        null,
      ),
      targetRow(
        'cue parked → its owner p99 (ms)',
        f(idle).parkedToOwnerMs.p99,
        f(loaded).parkedToOwnerMs.p99,
        TARGET.deliveredP99,
      ),
      targetRow(
        'cue parked → any operator p99 (ms)',
        f(idle).parkedToAnyMs.p99,
        f(loaded).parkedToAnyMs.p99,
        null,
      ),
      targetRow('event-loop delay p99 (ms)', idle.eldP99Ms, loaded.eldP99Ms, TARGET.eldP99),
      targetRow('event-loop delay max (ms)', idle.eldMaxMs, loaded.eldMaxMs, null),
      targetRow('/healthz p99 (ms)', f(idle).healthzMs.p99, f(loaded).healthzMs.p99, TARGET.healthP99),
      targetRow('/healthz max (ms)', f(idle).healthzMs.max, f(loaded).healthzMs.max, null),
      targetRow('resolveCue p50 (ms)', f(idle).resolveCueMs.p50, f(loaded).resolveCueMs.p50, null),
      targetRow('resolveCue p99 (ms)', f(idle).resolveCueMs.p99, f(loaded).resolveCueMs.p99, null),
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
      targetRow(
        'Questions per run (MariaDB, server-wide)',
        idle.questionsPerRun,
        loaded.questionsPerRun,
        null,
      ),
      targetRow(
        'instant → last completed (ms)',
        f(idle).lastCompletedMs,
        f(loaded).lastCompletedMs,
        lastLimit,
        `<= 1.1 x (program ${programMs} + answering ${answeringMs}) = ${lastLimit}`,
      ),
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
      inbox: INBOX === 'mine' ? 'waitingSteps(mine: true)' : 'waitingSteps (everybody’s)',
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
        'GO → next p99 <= 100 ms; wait overshoot p99 <= 100 ms; cue → owner p99 <= 250 ms; /healthz p99 <= 50 ms; event-loop delay p99 <= 50 ms; RSS peak <= 2.5x idle, after a minute <= 1.2x; last completed <= 1.1 x (program + answering); every run completed, no cue applied twice',
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
        webhooks: { received: keys.length, distinctKeys, expected: webhooksExpected },
        clientsRssMb: Math.round(clientsReport.rssMb),
        clientErrors: clientsReport.errors.slice(0, 10),
        eventLoopDelay: `perf_hooks.monitorEventLoopDelay in the server's process, ${ELD_RESOLUTION_MS} ms sampling subtracted`,
      },
    }
    const results = { showtime, showtimeBurst: burst, showtimeHostile: hostile }
    for (const [name, r] of Object.entries(results)) await saveResult(name, r)
    return results
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

runMain(import.meta.url, async () => printResults(await run()))
