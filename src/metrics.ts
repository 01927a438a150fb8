/**
 * Prometheus metrics, served as text on `GET /metrics`.
 *
 * Each {@link createMetrics} call owns its own Registry rather than prom-client's
 * global one, so tests (and a process hosting several servers) can create as
 * many as they like without "metric already registered" errors.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import { RUN_STATUSES } from '../sql/states.ts'
import { type Logger, silentLogger } from './log.ts'

/** Answers how many runs are in each status; called on every scrape. */
export type RunsByStatusSource = () => Promise<Record<string, number>>

/** What needs a person's attention, read from the database at scrape time. */
export interface AttentionSnapshot {
  /** Steps parked on a person (cues); never a `core.wait` timer. */
  waitingSteps: number
  /** When the longest-waiting parked step started waiting; null when none waits. */
  oldestWaitingStepAt: Date | null
  /** Runs not yet terminal whose health is `degraded`. */
  degradedRuns: number
}

/** Answers {@link AttentionSnapshot}; called once per scrape. */
export type AttentionSource = () => Promise<AttentionSnapshot>

export interface Metrics {
  readonly registry: Registry
  /** Labels: method, route (`/graphql`, `/metrics`, …, never the raw URL), status. */
  readonly httpRequestDuration: Histogram<'method' | 'route' | 'status'>
  /** Labels: field (`Query.runs`, `Mutation.startRun`, …). */
  readonly resolverDuration: Histogram<'field'>
  readonly tickDuration: Histogram
  /** A claim UPDATE matched no row: another instance (or an admin) got there first. */
  readonly claimConflicts: Counter
  readonly tickErrors: Counter
  /** Labels: kind (`core.webhook`, …), outcome (`completed`, `failed`, `retry`, `parked`, …). */
  readonly steps: Counter<'kind' | 'outcome'>
  /** Filled on scrape from {@link Metrics.setRunsByStatusSource}. Label: status. */
  readonly runsByStatus: Gauge<'status'>
  readonly openSubscriptions: Gauge
  /** How late the last tick started, in milliseconds. */
  readonly tickLagMs: Gauge
  /** Filled on scrape from {@link Metrics.setAttentionSource}. */
  readonly waitingSteps: Gauge
  /** Filled on scrape from {@link Metrics.setAttentionSource}; 0 when no step waits. */
  readonly oldestWaitingStepAgeSeconds: Gauge
  /** Filled on scrape from {@link Metrics.setAttentionSource}. */
  readonly degradedRuns: Gauge
  /** Set (or clear, with null) the callback the runs-by-status gauge is read from. */
  setRunsByStatusSource(source: RunsByStatusSource | null): void
  /** Set (or clear, with null) the callback the waiting-step and degraded-run gauges are read from. */
  setAttentionSource(source: AttentionSource | null): void
  /** The scrape body and its Content-Type. */
  render(): Promise<{ contentType: string; body: string }>
}

/** Options for {@link createMetrics}. */
export interface MetricsOptions {
  /** Where scrape-time failures are reported. @default silentLogger() */
  log?: Logger
  /** Include Node's process metrics (CPU, memory, event loop, GC). @default true */
  defaultMetrics?: boolean
  /** How long a scrape waits for each database source. @default 2000 */
  sourceTimeoutMs?: number
  /** The clock a waiting step's age is measured against, in epoch ms. @default Date.now */
  now?: () => number
}

export function createMetrics(opts: MetricsOptions = {}): Metrics {
  const log = opts.log ?? silentLogger()
  const sourceTimeoutMs = opts.sourceTimeoutMs ?? 2000
  const now = opts.now ?? Date.now
  const registry = new Registry()
  if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: registry })

  const httpRequestDuration = new Histogram({
    name: 'showrunner_http_request_duration_seconds',
    help: 'HTTP request duration, by method, route and status code.',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  })
  const resolverDuration = new Histogram({
    name: 'showrunner_resolver_duration_seconds',
    help: 'GraphQL root field resolver duration, by field.',
    labelNames: ['field'] as const,
    // Resolvers are mostly one or two indexed queries: resolve the low end finely.
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  })
  const tickDuration = new Histogram({
    name: 'showrunner_tick_duration_seconds',
    help: 'Duration of one runner tick.',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  })
  const claimConflicts = new Counter({
    name: 'showrunner_claim_conflicts_total',
    help: 'Claims that matched no row because another worker or an operator moved the run first.',
    registers: [registry],
  })
  const tickErrors = new Counter({
    name: 'showrunner_tick_errors_total',
    help: 'Ticks that ended in an error.',
    registers: [registry],
  })
  const steps = new Counter({
    name: 'showrunner_steps_total',
    help: 'Step attempts, by kind and outcome.',
    labelNames: ['kind', 'outcome'] as const,
    registers: [registry],
  })

  /**
   * Call a scrape-time database source within the timeout. A failing or slow
   * database must not fail the whole scrape (process metrics are most useful
   * exactly then): the error is logged and null answered, so the caller drops
   * its series rather than leave them stale. Null too when no source is set.
   */
  const readSource = async <T>(source: (() => Promise<T>) | null, what: string): Promise<T | null> => {
    if (!source) return null
    try {
      return await withTimeout(source(), sourceTimeoutMs)
    } catch (err) {
      log.warn({ err }, `metrics: could not read ${what}`)
      return null
    }
  }

  let source: RunsByStatusSource | null = null
  const runsByStatus = new Gauge({
    name: 'showrunner_runs_by_status',
    help: 'Runs in each status. Statuses still in progress are counted at every scrape; terminal ones come from a full count taken at most every 5 minutes.',
    labelNames: ['status'] as const,
    registers: [registry],
    // prom-client awaits this before rendering.
    async collect() {
      const counts = await readSource(source, 'runs by status')
      this.reset()
      if (counts === null) return
      // Every known status is present, zero included, so a status that empties
      // reads 0 rather than vanishing from the graph.
      for (const status of RUN_STATUSES) this.set({ status }, 0)
      for (const [status, n] of Object.entries(counts)) {
        if (Number.isFinite(n)) this.set({ status }, n)
      }
    },
  })
  const openSubscriptions = new Gauge({
    name: 'showrunner_open_subscriptions',
    help: 'GraphQL subscriptions currently open on this instance.',
    registers: [registry],
  })
  const tickLagMs = new Gauge({
    name: 'showrunner_tick_lag_ms',
    help: 'How late the most recent tick started relative to its schedule, in milliseconds.',
    registers: [registry],
  })

  // Three gauges read one snapshot: render() takes it once per scrape, so a
  // scrape costs one read however many of them there are. A source that fails
  // or hangs is logged once and the three series are left out of that scrape:
  // "0 cues waiting" while the database is away would tell an alert all is well.
  let attentionSource: AttentionSource | null = null
  let attentionThisScrape: Promise<AttentionSnapshot | null> | null = null
  const readAttention = () => readSource(attentionSource, 'the steps waiting on people')
  const attentionGauge = (name: string, help: string, value: (a: AttentionSnapshot) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const snapshot = await (attentionThisScrape ?? readAttention())
        if (snapshot === null) this.remove()
        else this.set(value(snapshot))
      },
    })
  const waitingSteps = attentionGauge(
    'showrunner_waiting_steps',
    'Steps parked on a person (cues), read from the database at scrape time.',
    (a) => a.waitingSteps,
  )
  const oldestWaitingStepAgeSeconds = attentionGauge(
    'showrunner_oldest_waiting_step_age_seconds',
    'How long the longest-waiting parked step has waited, in seconds; 0 when none waits. Alert on this.',
    (a) =>
      a.oldestWaitingStepAt === null ? 0 : Math.max(0, (now() - a.oldestWaitingStepAt.getTime()) / 1000),
  )
  const degradedRuns = attentionGauge(
    'showrunner_degraded_runs',
    'Runs not yet terminal whose health is degraded, read from the database at scrape time.',
    (a) => a.degradedRuns,
  )

  return {
    registry,
    httpRequestDuration,
    resolverDuration,
    tickDuration,
    claimConflicts,
    tickErrors,
    steps,
    runsByStatus,
    openSubscriptions,
    tickLagMs,
    waitingSteps,
    oldestWaitingStepAgeSeconds,
    degradedRuns,
    setRunsByStatusSource(next) {
      source = next
      if (!next) runsByStatus.reset()
    },
    setAttentionSource(next) {
      attentionSource = next
    },
    async render() {
      attentionThisScrape = readAttention()
      try {
        return { contentType: registry.contentType, body: await registry.metrics() }
      } finally {
        attentionThisScrape = null
      }
    },
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms)
  })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}
