/**
 * The runner's sweeps besides advancing runs, each throttled on its own
 * interval: materialising schedules into runs, marking runs that missed their
 * grace window, tidying leases whose owner did not come back, deleting old
 * logs and runs (retention), and the instance's heartbeat.
 */

import { hostname } from 'node:os'
import { performance } from 'node:perf_hooks'
import * as audit from '../../sql/auditLog.ts'
import type { Db } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as receipts from '../../sql/flushReceipts.ts'
import * as inboxDoorbells from '../../sql/inboxDoorbells.ts'
import * as overrides from '../../sql/occurrenceOverrides.ts'
import type { DoorbellAddress } from '../../sql/runnerHeartbeats.ts'
import * as heartbeats from '../../sql/runnerHeartbeats.ts'
import * as quotas from '../../sql/runQuotas.ts'
import { RECORD_RETRY_MS } from './executor/writer.ts'
import { materialiseAll } from './materialise.ts'
import type { RunnerLogger } from './options.ts'
import type { RunnerObserver } from './types.ts'

export interface HousekeepingDeps {
  db: Db
  instanceId: string
  logger: RunnerLogger
  observer?: RunnerObserver
  horizonMs: number
  maxRunsAhead: number
  materialiseEveryMs: number
  logRetentionMs: number
  runRetentionMs: number
  /** audit_log rows older than this are deleted; 0 keeps every row. */
  auditRetentionMs: number
  retentionEveryMs: number
  /**
   * The running loop's lease sweeps run once per this (its tick), give or
   * take: two passes a tick apart can find their sweeps a few milliseconds
   * less than a tick apart, so a sweep is skipped only within half of it.
   */
  reclaimEveryMs: number
  /** True once the runner is stopping: a long sweep stops between rounds. */
  stopping: () => boolean
  /** Where instances without a runner ring this one (doorbell.ts), sent with each heartbeat. */
  doorbellAddress?: () => DoorbellAddress | null
}

/** Runs per retention round: each round is a few statements over this many runs. */
const RUN_RETENTION_BATCH = 200
/** Rounds per sweep (the rest waits for the next sweep, so one sweep never takes a tick for long). */
const RUN_RETENTION_ROUNDS = 50
/**
 * Time one tick may spend deleting old runs. The sweep runs inside the tick:
 * a first sweep over a long history must not hold due runs back, so it stops
 * here and goes on at the next tick until the backlog is gone.
 */
const RUN_RETENTION_TICK_BUDGET_MS = 250
/**
 * How long a flush's receipt is kept: five times the longest a flush is sent
 * again, since only then is it read.
 */
const FLUSH_RECEIPT_KEEP_SECONDS = (5 * RECORD_RETRY_MS) / 1000

/** Log lines the retention sweep reads per statement. */
const RETENTION_PAGE = 1000
/** Heartbeat rows of instances silent this long are deleted (on the retention sweep's cadence). */
const HEARTBEAT_KEEP_MS = 7 * 24 * 3600_000

export class Housekeeping {
  private lastMaterialise = 0
  /** When a count-bounded window (a dense schedule) needs topping up, before the usual interval. */
  private refillAt: number | null = null
  private materialiseRequested = true
  /** Old runs were left by the last sweep's time budget: go on at the next tick. */
  private runRetentionBacklog = false
  private lastRetention = 0
  /** When the lease sweeps last ran (performance.now(), not the runner's clock: leases expire on the database's). */
  private lastReclaim = Number.NEGATIVE_INFINITY
  private readonly startedAt = new Date()

  constructor(private readonly deps: HousekeepingDeps) {}

  /** Materialise at the next pass (a definition changed). */
  requestMaterialise(): void {
    this.materialiseRequested = true
  }

  /** Materialise schedules into runs when asked to, when the interval has passed, or when a window needs topping up. */
  async materialiseIfDue(now: Date): Promise<number> {
    const { deps } = this
    if (
      !this.materialiseRequested &&
      now.getTime() - this.lastMaterialise < deps.materialiseEveryMs &&
      (this.refillAt === null || now.getTime() < this.refillAt)
    )
      return 0
    this.materialiseRequested = false
    this.lastMaterialise = now.getTime()
    const pass = await materialiseAll(
      deps.db,
      now,
      { horizonMs: deps.horizonMs, maxRunsAhead: deps.maxRunsAhead },
      (def, err) =>
        deps.logger.error(
          { err, definitionId: def.id, slug: def.slug },
          'materialisation failed for a definition',
        ),
    )
    this.refillAt = pass.refillAt?.getTime() ?? null
    return pass.created
  }

  /** True when a definition changed since the last pass (its runs may be due now). */
  get materialiseRequestedNow(): boolean {
    return this.materialiseRequested
  }

  /**
   * Release run and step leases whose owner did not come back: in the
   * running loop at most twice per `reclaimEveryMs` (once a tick when it is
   * quiet, as before), on every other pass (`always`: a pass asked for by
   * hand, `tick()`).
   *
   * Why not on every pass: under load the loop passes five and more times a
   * second (every nudge is a pass), and the step sweep reads every live run's
   * steps to find none: a third of all the rows the database read in a show
   * of 1,000 (docs/performance.md, fifteenth round). Nothing waits for it:
   * every claim takes an expired lease as if it were free (`leaseFree`), so
   * the sweep only tidies the rows a reader sees, and a quiet loop passes
   * once a tick anyway.
   */
  async reclaimIfDue(always: boolean): Promise<void> {
    const at = performance.now()
    if (!always && at - this.lastReclaim < this.deps.reclaimEveryMs / 2) return
    this.lastReclaim = at
    const { db } = this.deps
    await runs.reclaimStale(db)
    await steps.reclaimStale(db)
  }

  /** Runs still `scheduled` past their grace window become `missed`. Answers the runs it marked. */
  async markMissed(now: Date): Promise<number[]> {
    const { db } = this.deps
    const marked: number[] = []
    for (let round = 0; round < 20; round++) {
      // findMissed answers `scheduled` runs only; the transition is guarded on
      // it too, so a run started meanwhile keeps its start.
      const missed = await runs.findMissed(db, now, 500)
      if (missed.length === 0) break
      const ids = missed.map((r) => r.id)
      await runs.transitionMany(db, ids, 'scheduled', 'missed', {
        error: 'not started within its grace window',
      })
      const entries = await Promise.all(
        missed.map(async (r) => {
          const holder = r.concurrencyKey ? await runs.concurrencyHolder(db, r.concurrencyKey, r.id) : null
          return {
            runId: r.id,
            level: 'warn' as const,
            message: holder
              ? `missed: not started within the grace window; concurrency key "${r.concurrencyKey}" was held by run ${holder.id}`
              : 'missed: not started within the grace window',
            actor: this.deps.instanceId,
            data: holder ? { holderRunId: holder.id } : undefined,
          }
        }),
      )
      await logs.appendMany(db, entries)
      marked.push(...ids)
      if (missed.length < 500) break
    }
    return marked
  }

  /**
   * Log and run retention, forgetting silent instances, and the flushes' old
   * receipts, at most once per `retentionEveryMs`.
   */
  async retentionIfDue(now: Date): Promise<void> {
    if (!this.runRetentionBacklog) {
      if (now.getTime() - this.lastRetention < this.deps.retentionEveryMs) return
      this.lastRetention = now.getTime()
      await this.logRetention(now)
      await this.auditRetention()
      await this.overrideRetention(now)
      await this.deleteInBatches((limit) =>
        receipts.deleteOlderThan(this.deps.db, FLUSH_RECEIPT_KEEP_SECONDS, limit),
      )
    }
    this.runRetentionBacklog = await this.runRetention(now)
  }

  /**
   * audit_log retention (AUDIT_RETENTION_DAYS), a batch per statement, and the
   * run quota's past minutes (a minute's count is worth nothing once it is over).
   */
  private async auditRetention(): Promise<void> {
    const { db, logger, auditRetentionMs } = this.deps
    if (auditRetentionMs > 0) {
      const deleted = await this.deleteInBatches((limit) =>
        audit.deleteOlderThan(db, auditRetentionMs, limit),
      )
      if (deleted > 0)
        logger.info(
          { rows: deleted, olderThanDays: auditRetentionMs / 86_400_000 },
          'audit retention: deleted old audit rows',
        )
    }
    await quotas.deleteBefore(db, Math.floor(Date.now() / 60_000) - 1, 10_000)
  }

  /**
   * Skips and moves of occurrences older than the run history's retention: a
   * backfill over a range that old makes its runs as the schedule alone says,
   * as if the history had never been (it has been deleted too).
   */
  private async overrideRetention(now: Date): Promise<void> {
    const { db, logger, runRetentionMs } = this.deps
    if (runRetentionMs <= 0) return
    const cutoff = new Date(now.getTime() - runRetentionMs)
    const deleted = await this.deleteInBatches((limit) => overrides.deleteBefore(db, cutoff, limit))
    if (deleted > 0)
      logger.info({ rows: deleted, before: cutoff }, 'override retention: forgot old skips and moves')
  }

  /**
   * A delete of old rows, a batch of 1,000 per statement, at most 20 a sweep
   * (what is left goes at the next one), stopping when the runner stops.
   * Answers how many rows went.
   */
  private async deleteInBatches(deleteAtMost: (limit: number) => Promise<number>): Promise<number> {
    let deleted = 0
    for (let round = 0; round < 20 && !this.deps.stopping(); round++) {
      const n = await deleteAtMost(1000)
      deleted += n
      if (n < 1000) break
    }
    return deleted
  }

  /** Say this instance is alive, and how late its tick was. */
  async beat(tickLagMs: number): Promise<void> {
    await heartbeats.beat(this.deps.db, {
      instanceId: this.deps.instanceId,
      host: hostname(),
      pid: process.pid,
      startedAt: this.startedAt,
      tickLagMs,
      doorbell: this.deps.doorbellAddress?.() ?? null,
    })
  }

  /**
   * Run history retention: terminal runs that ended before the retention
   * period go with their steps and logs, a batch of {@link RUN_RETENTION_BATCH}
   * per round of short statements, never a run that is not terminal. Each
   * round's counts go to the observer, so cached run counts stay right.
   */
  /** Answers true when it stopped on its time budget with old runs left (the next tick goes on). */
  private async runRetention(now: Date): Promise<boolean> {
    const { deps } = this
    if (deps.runRetentionMs <= 0) return false
    const cutoff = new Date(now.getTime() - deps.runRetentionMs)
    const startedAt = Date.now()
    let total = 0
    let more = false
    for (let round = 0; round < RUN_RETENTION_ROUNDS; round++) {
      if (deps.stopping()) break
      const expired = await runs.expiredRuns(deps.db, cutoff, RUN_RETENTION_BATCH)
      if (expired.length === 0) break
      const deleted = await runs.deleteTerminalRuns(deps.db, expired)
      deps.observer?.runsDeleted?.(deleted)
      total += Object.values(deleted).reduce((a, n) => a + (n ?? 0), 0)
      if (expired.length < RUN_RETENTION_BATCH) break
      if (Date.now() - startedAt >= RUN_RETENTION_TICK_BUDGET_MS) {
        more = true
        break
      }
    }
    if (total > 0) deps.logger.info({ runs: total, before: cutoff }, 'run retention: deleted finished runs')
    return more
  }

  /**
   * Delete the logs of runs that ended more than the retention period ago, and
   * forget instances silent for a week. The sweep walks the log lines from the
   * oldest one and stops at the first line young enough to keep: what it reads
   * is what it deletes plus the old lines of runs still going (or ended within
   * the period), not every finished run, which walking the runs read again on
   * every sweep once their logs were gone.
   */
  private async logRetention(now: Date): Promise<void> {
    const { db, logger } = this.deps
    const cutoff = new Date(now.getTime() - this.deps.logRetentionMs)
    let after = 0
    for (let round = 0; round < 20; round++) {
      const lines = await logs.oldestLines(db, after, RETENTION_PAGE)
      const old = lines.filter((l) => l.at.getTime() < cutoff.getTime())
      const ended = await runs.endedBefore(db, [...new Set(old.map((l) => l.runId))], cutoff)
      if (ended.length > 0) {
        const deleted = await logs.deleteForRuns(db, ended)
        logger.info({ runs: ended.length, lines: deleted }, 'log retention: deleted logs of finished runs')
      }
      // Old lines of runs not found ended: running still, or gone (a line
      // written as its run was deleted; no foreign key refuses it).
      const endedSet = new Set(ended)
      const orphaned = await logs.deleteOrphaned(
        db,
        [...new Set(old.map((l) => l.runId))].filter((id) => !endedSet.has(id)),
      )
      if (orphaned > 0) logger.info({ lines: orphaned }, 'log retention: deleted lines of deleted runs')
      const last = lines.at(-1)
      if (last === undefined || old.length < lines.length || lines.length < RETENTION_PAGE) break
      after = last.id
    }
    const silentSince = new Date(now.getTime() - HEARTBEAT_KEEP_MS)
    const forgotten = await heartbeats.pruneBefore(db, silentSince)
    if (forgotten > 0) logger.info({ instances: forgotten }, 'forgot runner instances silent for a week')
    // An instance that crashed leaves its inbox doorbell behind; it is never rung (stale), only kept.
    const bellsForgotten = await inboxDoorbells.pruneBefore(db, silentSince)
    if (bellsForgotten > 0)
      logger.info({ instances: bellsForgotten }, 'forgot inbox doorbells silent for a week')
  }
}
