/**
 * The loaded show of bench/showtime.ts on more than one instance, each server
 * in a process of its own (bench/showtimeInstance.ts, `npm start`'s node flags,
 * the defaults) on one fresh database, the clients in theirs:
 *
 * - `split`: SHOWTIME_API_INSTANCES (2) API-only instances (`RUNNER=off`) in
 *   front of one runner instance. The operators and dashboards connect to the
 *   API instances, spread evenly (client i to API instance i mod n), and answer
 *   there; the runner instance serves only the set-up and its `/healthz` probe.
 * - `three`: three full instances (runner on in each), clients spread across
 *   all three.
 *
 * Only the loaded show (no idle phase, burst or hostile subscriber): the
 * figures are held beside the single instance's loaded figures from the same
 * `npm run bench`. Every instance's `/healthz` is probed every 100 ms.
 */
import { type BenchResult, benchDb, sleep, startScriptNodeFlags } from './lib.ts'
import { BENCH_TOKENS } from './server.ts'
import {
  COMPLETION_FIGURES,
  type PhaseFigures,
  phaseFigures,
  phaseParkTimes,
  phaseSteps,
  SERVING_FIGURES,
  type Spread,
  spread,
  TIMING_FIGURES,
} from './showtimeFigures.ts'
import type { InstanceCommand, InstanceStats } from './showtimeInstance.ts'
import type { ClientsReport } from './showtimeMessages.ts'
import {
  ANSWER_SLUG_PATTERN,
  ANSWERS_IN_FLIGHT,
  awaitShowFinished,
  ClientsProcess,
  IpcChild,
  OPERATOR_TOKENS,
  SHOW_TOKENS,
  scheduleShow,
} from './showtimeSetup.ts'

export const SCALE_OUT_TOPOLOGIES = ['split', 'three'] as const
export type ScaleOutTopology = (typeof SCALE_OUT_TOPOLOGIES)[number]

const API_INSTANCES = Number(process.env.SHOWTIME_API_INSTANCES ?? 2)
const FULL_INSTANCES = 3

interface InstanceSpec {
  label: string
  env: Record<string, string>
  /** Operators and dashboards connect here. */
  serves: boolean
}

function instancesOf(topology: ScaleOutTopology): InstanceSpec[] {
  if (topology === 'split')
    return [
      { label: 'runner', env: {}, serves: false },
      ...Array.from({ length: API_INSTANCES }, (_, i) => ({
        label: `api-${i + 1}`,
        env: { RUNNER: 'off' },
        serves: true,
      })),
    ]
  return Array.from({ length: FULL_INSTANCES }, (_, i) => ({ label: `full-${i + 1}`, env: {}, serves: true }))
}

export interface InstanceFigures {
  label: string
  runner: boolean
  healthzMs: Spread
  healthzFailed: number
  eldP99Ms: number
  eldMaxMs: number
  rssPeakMb: number
  statementsPerRun: number
}

export interface ScaleOutShow {
  topology: ScaleOutTopology
  instances: InstanceFigures[]
  figures: PhaseFigures
  webhooks: { received: number; distinctKeys: number; expected: number }
  correct: boolean
  clientErrors: string[]
}

class Instance extends IpcChild<InstanceCommand> {
  urls = { graphqlUrl: '', wsUrl: '' }
  constructor(readonly spec: InstanceSpec) {
    super('./showtimeInstance.ts', `showtime instance ${spec.label}`, startScriptNodeFlags())
  }
  async stop(): Promise<void> {
    await this.ask({ type: 'stop' }, 'stopped', 15_000).catch(() => {})
    this.child.kill()
  }
}

/** `shows` shows at one instant on `topology`; the figures and the correctness checks of bench/showtime.ts. */
export async function scaleOutShow(
  topology: ScaleOutTopology,
  opts: {
    shows: number
    leadMs: number
    dashboards: number
    inbox: 'mine' | 'all' | 'changes'
    env: Record<string, string>
  },
): Promise<ScaleOutShow> {
  const b = await benchDb(4)
  const clients = new ClientsProcess()
  const instances: Instance[] = []
  try {
    const { url: receiverUrl } = await clients.next<{ url: string }>('receiver', 30_000)
    for (const spec of instancesOf(topology)) {
      const inst = new Instance(spec)
      instances.push(inst)
      inst.urls = await inst.ask<{ graphqlUrl: string; wsUrl: string }>(
        {
          type: 'start',
          databaseUrl: b.url,
          env: { SHOWRUNNER_TOKENS: SHOW_TOKENS, WEBHOOK_ALLOW: receiverUrl, ...opts.env, ...spec.env },
        },
        'started',
      )
    }
    const serving = instances.filter((i) => i.spec.serves)
    // An API-only instance's writes nudge no runner (that is in-process), so the
    // set-up goes to a runner instance: it materialises the runs at once.
    const setUp = instances.find((i) => i.spec.env.RUNNER !== 'off') as Instance
    const connected = await clients.ask<{ subscribed: number; errors: string[] }>(
      {
        type: 'connect',
        wsUrls: serving.map((i) => i.urls.wsUrl),
        graphqlUrls: serving.map((i) => i.urls.graphqlUrl),
        healthUrls: instances.map((i) => i.urls.graphqlUrl.replace(/\/graphql$/, '/healthz')),
        operatorTokens: OPERATOR_TOKENS,
        viewerToken: BENCH_TOKENS.viewer,
        dashboards: opts.dashboards,
        answersInFlight: ANSWERS_IN_FLIGHT,
        answerSlugPattern: ANSWER_SLUG_PATTERN,
        inbox: opts.inbox,
      },
      'connected',
    )
    console.log(
      `showtime ${topology}: ${instances.map((i) => i.spec.label).join(', ')}; ${connected.subscribed} subscribers on ` +
        `${serving.length} of them${connected.errors.length ? `; ${connected.errors}` : ''}`,
    )
    const { instant, defs } = await scheduleShow(setUp.urls, b.db, {
      prefix: 'show-',
      shows: opts.shows,
      leadMs: opts.leadMs,
      receiverUrl,
    })
    const before = await Promise.all(instances.map((i) => i.ask<InstanceStats>({ type: 'stats' }, 'stats')))
    await sleep(instant.getTime() - Date.now())
    await Promise.all(instances.map((i) => i.ask({ type: 'reset' }, 'reset')))
    await awaitShowFinished(b.db, defs, opts.shows)
    const to = Date.now()
    const after = await Promise.all(instances.map((i) => i.ask<InstanceStats>({ type: 'stats' }, 'stats')))
    const report = await clients.ask<ClientsReport>({ type: 'report' }, 'report')
    const window = { from: instant.getTime(), to }
    const figures = phaseFigures(
      await phaseSteps(b.db, defs.from, defs.to),
      report,
      window,
      await phaseParkTimes(b.db, defs.from, defs.to),
    )
    const perInstance = instances.map((inst, k): InstanceFigures => {
      const probes = report.health.filter((h) => h.instance === k && h.at >= window.from && h.at <= window.to)
      const a = after[k] as InstanceStats
      return {
        label: inst.spec.label,
        runner: inst.spec.env.RUNNER !== 'off',
        healthzMs: spread(probes.map((h) => h.ms)),
        healthzFailed: probes.filter((h) => !h.ok).length,
        eldP99Ms: a.eldP99Ms,
        eldMaxMs: a.eldMaxMs,
        rssPeakMb: a.rssPeakMb,
        statementsPerRun:
          Math.round(((a.statements - (before[k] as InstanceStats).statements) / opts.shows) * 100) / 100,
      }
    })
    const keys = report.receiverKeys
    const webhooks = { received: keys.length, distinctKeys: new Set(keys).size, expected: 2 * opts.shows }
    const correct =
      figures.completed === opts.shows &&
      figures.answeredTwice === 0 &&
      figures.secondAnswersApplied === 0 &&
      figures.cuesNeverSeenByOwner === 0 &&
      webhooks.received === webhooks.expected &&
      webhooks.distinctKeys === webhooks.expected
    return {
      topology,
      instances: perInstance,
      figures,
      webhooks,
      correct,
      clientErrors: report.errors.slice(0, 10),
    }
  } finally {
    clients.child.send({ type: 'finish' })
    await Promise.race([new Promise((r) => clients.child.once('exit', r)), sleep(5000)])
    clients.child.kill()
    for (const inst of instances.reverse()) await inst.stop()
    await b.drop()
  }
}

const ALL_FIGURES = [...TIMING_FIGURES, ...SERVING_FIGURES, ...COMPLETION_FIGURES]

/** One row per figure: the single instance's loaded value beside each topology's, and whether each meets it. */
export function scaleOutRows(single: PhaseFigures | null, shows: readonly ScaleOutShow[]) {
  const rows: Record<string, number | string>[] = ALL_FIGURES.map((x) => {
    const row: Record<string, number | string> = { figure: x.figure, single: single ? x.of(single) : '—' }
    for (const s of shows) {
      const v = x.of(s.figures)
      row[s.topology] = Number.isFinite(v) ? v : '—'
    }
    row.target = x.target ?? (x.limit === null ? 'reported' : `<= ${x.limit}`)
    return row
  })
  const perInstance = (what: string, of: (i: InstanceFigures) => number) => {
    const row: Record<string, number | string> = { figure: what, single: '—' }
    for (const s of shows) row[s.topology] = s.instances.map((i) => `${i.label} ${of(i)}`).join(', ')
    row.target = 'reported'
    return row
  }
  rows.push(perInstance('/healthz p99 per instance (ms)', (i) => i.healthzMs.p99))
  rows.push(perInstance('event-loop delay p99 per instance (ms)', (i) => i.eldP99Ms))
  rows.push(perInstance('RSS peak per instance (MB)', (i) => i.rssPeakMb))
  return rows
}

/** The figures of one topology that miss their limit. */
export function missedBy(s: ScaleOutShow): string[] {
  return ALL_FIGURES.filter((x) => x.limit !== null && !(x.of(s.figures) <= x.limit)).map((x) => x.figure)
}

export function scaleOutResult(single: PhaseFigures | null, shows: readonly ScaleOutShow[]): BenchResult {
  const head = shows[0] as ScaleOutShow
  const go = head.figures.goToNextMs.p99
  const base = single?.goToNextMs.p99 ?? null
  return {
    value: go,
    unit: `ms (GO → next step p99, ${head.topology === 'split' ? 'API-only instances in front of a runner' : 'three full instances'})`,
    baseline: base,
    ratio: base && base > 0 ? go / base : null,
    target:
      'the single instance’s targets on every topology (GO, overshoot p99 <= 100 ms; cue → owner p99 <= 250 ms; /healthz p99 <= 50 ms; per run end − instant − answering <= 1.1 x program); every run completed, no cue applied twice, second answers applied: false, webhook keys distinct',
    met: shows.every((s) => s.correct && missedBy(s).length === 0),
    detail: {
      topologies: Object.fromEntries(
        shows.map((s) => [
          s.topology,
          {
            instances: s.instances,
            correct: s.correct,
            missed: missedBy(s),
            webhooks: s.webhooks,
            figures: s.figures,
            clientErrors: s.clientErrors,
          },
        ]),
      ),
      rows: scaleOutRows(single, shows),
      singleFromThisRun: single !== null,
    },
  }
}
