/**
 * The database pools an instance opens, and which of them it must close.
 *
 * - The API's, whose wait queue is bounded so a flood answers "busy" instead
 *   of queueing for ever.
 * - The runner's own, so no amount of API load can keep a tick waiting for a
 *   connection (none with RUNNER=off).
 * - One connection for the cue inbox's polls. In a show the API's pool is
 *   busy with answers and dashboards, and a poll queued behind them: a cue
 *   the runner had parked reached its person a second late at the p99
 *   (showtime, park → owner 0.8–1.3 s; on its own connection 0.2–0.3 s).
 * - One connection for the `runChanges` feed: its polls, and the reads of
 *   the changes it hands out (the runs whole, their definitions, whatever a
 *   dashboard's selection asks for). On the API's pool a poll's reads waited
 *   behind the answers for 0.3–0.7 s at the p90 in a show; and a dashboard's
 *   selection, however heavy, now queues on the feed's connection, not in
 *   front of the API's requests.
 *
 * Pools open no connection until used. A pool passed in is the caller's to
 * close; with no URL to open more, everything uses the one passed in.
 */
import { createDb, type Db } from '../sql/db.ts'
import type { Config } from './config.ts'

export interface Pools {
  /** The API's pool. */
  db: Db
  /** The runner's; null with RUNNER=off. */
  runnerDb: Db | null
  /** The cue inbox's polls. */
  inboxDb: Db
  /** The runChanges feed's polls and the reads of what it hands out. */
  changesDb: Db
  /** Close the pools this instance opened. */
  close(): Promise<void>
}

export function openPools(
  config: Pick<Config, 'databaseUrl' | 'dbPoolSize' | 'dbQueueLimit' | 'runner' | 'runnerDbPoolSize'>,
  given: { db?: Db; runnerDb?: Db },
): Pools {
  const url = config.databaseUrl
  if (!given.db && !url) {
    throw new Error(
      'buildApp needs a database: set DATABASE_URL (mysql://user:pass@host:3306/db) or pass deps.db.',
    )
  }
  const opened: Db[] = []
  const open = (connectionLimit: number, queueLimit?: number): Db => {
    const db = createDb(url as string, { connectionLimit, queueLimit })
    opened.push(db)
    return db
  }
  const db = given.db ?? open(config.dbPoolSize, config.dbQueueLimit)
  const runnerDb =
    config.runner !== 'on' ? null : (given.runnerDb ?? (url ? open(config.runnerDbPoolSize) : db))
  const inboxDb = url ? open(1) : db
  const changesDb = url ? open(1) : db
  return {
    db,
    runnerDb,
    inboxDb,
    changesDb,
    async close() {
      await Promise.all(opened.map((p) => p.close()))
    },
  }
}
