/**
 * The runner and the notification dispatcher as a server hosts them: built
 * from the config, on the runner's own pool, their observations turned into
 * metrics and into the change signal that wakes the live feeds. Only
 * instances that run the runner (`RUNNER=on`) build them.
 */
import type { Db } from '../sql/db.ts'
import type { ChangeSignal } from './api/changeSignal.ts'
import type { Config } from './config.ts'
import type { Logger } from './log.ts'
import type { Metrics } from './metrics.ts'
import { issueAnswerLink } from './notify/answerLinks.ts'
import { Dispatcher } from './notify/dispatcher.ts'
import { emailSender } from './notify/email.ts'
import { notifyHousekeeping } from './notify/housekeeping.ts'
import type { RunCountsReader } from './runCounts.ts'
import type { Clock } from './runner/clock.ts'
import { DbCueLadder } from './runner/cueLadder.ts'
import { Runner } from './runner/runner.ts'
import type { StepRegistry } from './runner/steps/registry.ts'

export interface RunnerHostDeps {
  /** The runner's own pool (never the API's, so API load cannot starve a tick). */
  db: Db
  registry: StepRegistry
  clock: Clock
  logger: Logger
  metrics: Metrics
  runCounts: RunCountsReader
  changes: ChangeSignal
  /** Raised when a round's write parked cues: wakes the cue inbox alone (the runs change when released, told as before). */
  cuesParked: ChangeSignal
}

export function hostRunner(
  config: Config,
  { db, registry, clock, logger, metrics, runCounts, changes, cuesParked }: RunnerHostDeps,
): { runner: Runner; dispatcher: Dispatcher } {
  // A tick that finished a step changed a run; the feeds look after the tick.
  let tickChangedRuns = false

  const runner = new Runner({
    db,
    registry,
    clock,
    instanceId: config.instanceId,
    tickMs: config.tickMs,
    leaseMs: config.leaseMs,
    batchSize: config.runnerBatchSize,
    parallelism: config.runnerParallelism,
    startConcurrency: config.runnerStartConcurrency,
    wakeBatchesInFlight: config.runnerWakeBatches,
    // Instances with RUNNER=off ring it when they make a run due (src/doorbellRinger.ts).
    doorbell: true,
    horizonMs: config.materialiseHorizonHours * 3_600_000,
    logRetentionMs: config.logRetentionDays * 86_400_000,
    runRetentionMs: config.runRetentionDays * 86_400_000,
    auditRetentionMs: config.auditRetentionDays * 86_400_000,
    settings: { webhookAllow: config.webhookAllow, cueLadder: new DbCueLadder(db) },
    logger: logger.child({ component: 'runner' }),
    observer: {
      stepFinished: (kind, outcome) => {
        metrics.steps.inc({ kind, outcome })
        tickChangedRuns = true
      },
      // A run finished (its last step's outcome told before) is a change of its own.
      runsMoved: () => {
        tickChangedRuns = true
      },
      claimConflict: () => metrics.claimConflicts.inc(),
      tickDuration: (ms) => {
        metrics.tickDuration.observe(ms / 1000)
        if (tickChangedRuns) changes.notify()
        tickChangedRuns = false
      },
      // A batch advanced in flight after its pass: its changes are told at once, not at the next pass.
      batchAdvanced: () => {
        if (tickChangedRuns) changes.notify()
        tickChangedRuns = false
      },
      // A round parked cues: their owners' inboxes look now, mid-batch, not after the batch.
      cuesParked: () => cuesParked.notify(),
      tickError: () => metrics.tickErrors.inc(),
      tickLag: (ms) => metrics.tickLagMs.set(ms),
      runsDeleted: (byStatus) => runCounts.adjustForDeletedRuns(byStatus),
    },
  })

  // Notifications out: sent by instances that run the runner (docs/notifications.md).
  const dispatcher = new Dispatcher({
    db,
    owner: config.instanceId,
    settings: { webhookAllow: config.webhookAllow, secrets: process.env },
    publicUrl: config.publicUrl,
    sendEmail: config.smtpUrl ? emailSender(config.smtpUrl, config.smtpFrom) : null,
    intervalMs: config.notifyPollMs,
    logger: logger.child({ component: 'notify' }),
    afterPass: notifyHousekeeping(db, {
      retentionMs: config.notificationRetentionDays * 86_400_000,
    }),
    answerLink: config.publicUrl
      ? (d, c) => issueAnswerLink(db, config.publicUrl as string, d, c)
      : undefined,
  })
  return { runner, dispatcher }
}
