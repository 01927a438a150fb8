/**
 * The Runner's options and their defaults: what a caller may set (`npm start`
 * sets them from the environment, src/config.ts), and the values a runner
 * works with once the defaults are filled in.
 */
import type { Db } from '../../sql/db.ts'
import { type Clock, systemClock } from './clock.ts'
import { DEFAULT_MAX_RUNS_AHEAD } from './materialise.ts'
import type { StepRegistry } from './steps/registry.ts'
import type { StepSettings } from './steps/types.ts'
import type { RunnerObserver } from './types.ts'

/** Minimal logger shape (pino's). */
export interface RunnerLogger {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
  debug(obj: object, msg?: string): void
}

/** Options of {@link Runner}. */
export interface RunnerOptions {
  db: Db
  registry: StepRegistry
  /** Unique per process; shown as `claimedBy`. @default `${hostname}-${pid}-${random}` */
  instanceId?: string
  /** Milliseconds between ticks. @default 1000 */
  tickMs?: number
  /** Lease length for a claimed run. @default 30000 */
  leaseMs?: number
  /** Look-ahead for materialisation. @default 24 h */
  horizonMs?: number
  /**
   * Runs kept ahead per (definition, scope), at most: a dense schedule keeps a
   * rolling window this long, topped up when it has run half down.
   * @default 1000
   */
  maxRunsAhead?: number
  /** Minimum time between materialisation passes unless nudged. @default 60000 */
  materialiseEveryMs?: number
  /** Terminal runs' logs older than this are deleted. @default 30 days */
  logRetentionMs?: number
  /**
   * Terminal runs that ended longer ago than this are deleted with their steps
   * and logs; 0 keeps every run. @default 90 days
   */
  runRetentionMs?: number
  /** audit_log rows older than this are deleted; 0 keeps every row. @default 90 days */
  auditRetentionMs?: number
  /** Minimum time between retention sweeps. @default 1 h */
  retentionEveryMs?: number
  /**
   * Runs per start transaction, and in-flight runs leased per claim statement.
   * A tick runs up to 10 start transactions while a backlog lasts, then ticks
   * again at once. Larger batches are fewer, larger statements: 20,000 runs due
   * at one instant took 0.05 statements and about 80 µs of database CPU per run
   * at 200, 0.011 and about 45 µs at 1000. @default 2000
   */
  batchSize?: number
  /**
   * Runs advanced one by one at once (each uses one pooled connection at a
   * time), and steps a batch executes at once (webhooks in flight, say). @default 32
   */
  parallelism?: number
  /**
   * Start transactions in flight at once while a backlog of due runs drains
   * (each holds one pooled connection; one batch at a time otherwise). @default 4
   */
  startConcurrency?: number
  /**
   * Batches a running runner advances at once: each pass hands what it claimed
   * to a batch in flight and goes on, so what comes due meanwhile (a resolved
   * cue, a timer) is claimed and advanced by the next pass instead of waiting
   * behind a slow batch. A pass waits for a free slot. @default 4
   */
  batchesInFlight?: number
  /**
   * Batches the wake lane (wakeLane.ts: answered cues, timers that ran out)
   * advances at once, beside the passes' `batchesInFlight`. Its batches are
   * small and many (a few answers each) and each lives for its runs' rounds,
   * so at 4 a loaded lane waited for a slot (p90 232 ms, p99 1.2 s at 600
   * shows, docs/performance.md); the pool still bounds what reaches the
   * database. 0: no lane, woken runs are claimed by the passes (as before
   * the lane). @default 4 × batchesInFlight
   */
  wakeBatchesInFlight?: number
  /**
   * How long before a timer's end (a \`core.wait\`, a cue's timeout, a
   * retry's backoff) the wake lane claims its run, so that the claim's round
   * trips are behind it when the end comes and the step moves at its time
   * (wakeLane.ts). Needs a clock that moves with real time: 0 (claim when
   * due) for any other. @default 150 with the system clock, else 0
   */
  timerLeadMs?: number
  /** Steps per run per claim before it is given back. @default 25 */
  maxStepsPerClaim?: number
  /**
   * Listen on a doorbell (doorbell.ts) that instances without a runner ring
   * when they make a run due. The server turns it on; a runner driven by
   * `tick()` alone has no use for it. @default false
   */
  doorbell?: boolean
  settings?: StepSettings
  clock?: Clock
  logger?: RunnerLogger
  observer?: RunnerObserver
}

/**
 * A loaded lane's claim (a lease, then a read) took p50 14 / p99 50 ms in
 * the quick show (docs/performance.md, seventeenth round), but at 2,000
 * shows the lane's claims queue behind each other (one at a time) and a 2 s
 * wait's overshoot p99 read 170–440 ms with 50 here; with 150, 89–139
 * (twenty-second round). A held run's status is taken as read at the claim;
 * the step's begin checks that the run still advances (a pause in between
 * keeps the step from starting).
 */
export const TIMER_LEAD_MS = 150

const noopLogger: RunnerLogger = { info() {}, warn() {}, error() {}, debug() {} }

/** The options with every default filled in. */
export type ResolvedOptions = Required<Omit<RunnerOptions, 'observer' | 'instanceId'>> & {
  observer?: RunnerObserver
}

export function resolveOptions(options: RunnerOptions): ResolvedOptions {
  const batchesInFlight = Math.max(1, options.batchesInFlight ?? 4)
  return {
    db: options.db,
    registry: options.registry,
    tickMs: options.tickMs ?? 1000,
    leaseMs: options.leaseMs ?? 30_000,
    horizonMs: options.horizonMs ?? 24 * 3600_000,
    maxRunsAhead: options.maxRunsAhead ?? DEFAULT_MAX_RUNS_AHEAD,
    materialiseEveryMs: options.materialiseEveryMs ?? 60_000,
    logRetentionMs: options.logRetentionMs ?? 30 * 24 * 3600_000,
    runRetentionMs: options.runRetentionMs ?? 90 * 24 * 3600_000,
    auditRetentionMs: options.auditRetentionMs ?? 90 * 24 * 3600_000,
    retentionEveryMs: options.retentionEveryMs ?? 3600_000,
    batchSize: options.batchSize ?? 2000,
    parallelism: options.parallelism ?? 32,
    startConcurrency: Math.max(1, options.startConcurrency ?? 4),
    batchesInFlight,
    wakeBatchesInFlight: Math.max(0, options.wakeBatchesInFlight ?? 4 * batchesInFlight),
    timerLeadMs: Math.max(
      0,
      options.timerLeadMs ?? (options.clock && options.clock !== systemClock ? 0 : TIMER_LEAD_MS),
    ),
    maxStepsPerClaim: options.maxStepsPerClaim ?? 25,
    doorbell: options.doorbell ?? false,
    settings: options.settings ?? { webhookAllow: [] },
    clock: options.clock ?? systemClock,
    logger: options.logger ?? noopLogger,
    observer: options.observer,
  }
}
