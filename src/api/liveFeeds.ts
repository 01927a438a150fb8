/**
 * The live feeds an instance serves, built and wired together: the
 * `runStatus` poller, the `runChanges` feed and the cue inbox, each on its
 * pool or connection (src/pools.ts), woken by this process's changes, and the
 * inbox's doorbells across instances (inboxBell.ts).
 */
import type { Config } from '../config.ts'
import type { Logger } from '../log.ts'
import type { Metrics } from '../metrics.ts'
import type { Pools } from '../pools.ts'
import type { ChangeSignal } from './changeSignal.ts'
import { wireInboxDoorbells } from './inboxBell.ts'
import { INBOX_SETTLE_MS, InboxFeed } from './inboxFeed.ts'
import { RunChangeFeed } from './runChangeFeed.ts'
import { StatusPoller } from './statusPoller.ts'

export function openLiveFeeds(deps: {
  config: Pick<
    Config,
    'statusPollMs' | 'fanoutDeliveriesPerPoll' | 'fanoutDeliveriesPerSecond' | 'instanceId'
  >
  pools: Pick<Pools, 'db' | 'inboxDb' | 'changesDb'>
  logger: Logger
  metrics: Pick<Metrics, 'openSubscriptions'>
  /** Raised after every change this process makes. */
  changes: ChangeSignal
  /** Raised when this process's runner parked cues; null without a runner. */
  cuesParked: ChangeSignal | null
}) {
  const { config, pools, logger, metrics } = deps
  const feedOptions = {
    db: pools.db,
    intervalMs: config.statusPollMs,
    logger,
    onWatchersChange: (delta: 1 | -1) => metrics.openSubscriptions.inc(delta),
  }
  const poller = new StatusPoller(feedOptions)
  const runChanges = new RunChangeFeed({
    ...feedOptions,
    db: pools.changesDb,
    deliveriesPerPoll: config.fanoutDeliveriesPerPoll,
    deliveriesPerSecond: config.fanoutDeliveriesPerSecond,
  })
  const inbox = new InboxFeed({ ...feedOptions, pollDb: pools.inboxDb })
  deps.changes.on(() => runChanges.wake())
  // New cues reach their owners at once; other changes (answers, skips) leave
  // the inboxes within INBOX_SETTLE_MS, so a stream of answers shares polls.
  deps.changes.on(() => inbox.wake(INBOX_SETTLE_MS))
  deps.cuesParked?.on(() => inbox.wake())
  // Cues parked by a runner elsewhere wake this inbox too, and ours wake theirs.
  const inboxBells = wireInboxDoorbells({
    db: pools.inboxDb,
    instanceId: config.instanceId,
    logger,
    inbox,
    cuesParked: deps.cuesParked,
  })
  return {
    poller,
    runChanges,
    inbox,
    inboxBell: inboxBells.bell,
    /** Complete every watcher (ending SSE streams, `complete` on WebSockets), then put the doorbell away. */
    async close(): Promise<void> {
      await Promise.all([poller.close(), runChanges.close(), inbox.close()])
      await inboxBells.stop()
    },
  }
}
