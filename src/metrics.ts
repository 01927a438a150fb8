/**
 * Prometheus metrics, served as text on `GET /metrics`.
 *
 * Each {@link createMetrics} call owns its own Registry rather than prom-client's
 * global one, so tests (and a process hosting several servers) can create as
 * many as they like without "metric already registered" errors.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import { type Logger, silentLogger } from './log.ts'
import { RUN_STATUSES } from './states.ts'

/** Answers how many runs are in each status; called on every scrape. */
export type RunsByStatusSource = () => Promise<Record<string, number>>

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
  /** Set (or clear, with null) the callback the runs-by-status gauge is read from. */
  setRunsByStatusSource(source: RunsByStatusSource | null): void
  /** The scrape body and its Content-Type. */
  render(): Promise<{ contentType: string; body: string }>
}

/** Options for {@link createMetrics}. */
export interface MetricsOptions {
  /** Where scrape-time failures are reported. @default silentLogger() */
  log?: Logger
  /** Include Node's process metrics (CPU, memory, event loop, GC). @default true */
  defaultMetrics?: boolean
  /** How long a scrape waits for the runs-by-status source. @default 2000 */
  sourceTimeoutMs?: number
}

export function createMetrics(opts: MetricsOptions = {}): Metrics {
  const log = opts.log ?? silentLogger()
  const sourceTimeoutMs = opts.sourceTimeoutMs ?? 2000
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

  let source: RunsByStatusSource | null = null
  const runsByStatus = new Gauge({
    name: 'showrunner_runs_by_status',
    help: 'Runs in each status, read from the database at scrape time.',
    labelNames: ['status'] as const,
    registers: [registry],
    // prom-client awaits this before rendering. A failing or slow database must
    // not fail the whole scrape (process metrics are most useful exactly then),
    // so errors are logged and the series are dropped rather than left stale.
    async collect() {
      if (!source) return
      const current = source
      let counts: Record<string, number>
      try {
        counts = await withTimeout(current(), sourceTimeoutMs)
      } catch (err) {
        this.reset()
        log.warn({ err }, 'metrics: could not read runs by status')
        return
      }
      this.reset()
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
    setRunsByStatusSource(next) {
      source = next
      if (!next) runsByStatus.reset()
    },
    async render() {
      return { contentType: registry.contentType, body: await registry.metrics() }
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
