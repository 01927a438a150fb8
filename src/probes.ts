/**
 * The unauthenticated probes: `/healthz` (the process answers), `/readyz`
 * (the database answers and migrations are current) and `/metrics`
 * (Prometheus text, counts only). They read snapshots, so a scrape flood costs
 * one database read per PROBE_SNAPSHOT_MS, not statements per scrape.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Db } from '../sql/db.ts'
import { countDegraded } from '../sql/eventRuns/index.ts'
import { waitingSummary } from '../sql/eventSteps/index.ts'
import { pendingMigrations } from '../sql/migrate.ts'
import { sendJson } from './httpReply.ts'
import type { Metrics } from './metrics.ts'
import type { RunCountsReader } from './runCounts.ts'
import { createSnapshot } from './snapshot.ts'

/** How old the figures behind `/readyz` and `/metrics` may be, in milliseconds. */
export const PROBE_SNAPSHOT_MS = 2000

export interface ProbeDeps {
  db: Db
  metrics: Metrics
  runCounts: RunCountsReader
  /** True once the server is shutting down (`/readyz` then answers 503). */
  isStopping: () => boolean
}

export type ProbeRoute = '/healthz' | '/readyz' | '/metrics'

/** The handler of the three probe routes. */
export function createProbes(deps: ProbeDeps) {
  const { db, metrics, runCounts } = deps
  // The unauthenticated probes read snapshots: a scrape flood costs one read per
  // PROBE_SNAPSHOT_MS, not statements per scrape.
  const runCountsSnapshot = createSnapshot(() => runCounts(), PROBE_SNAPSHOT_MS)
  const attention = createSnapshot(async () => {
    const [waiting, degradedRuns] = await Promise.all([waitingSummary(db), countDegraded(db)])
    return { waitingSteps: waiting.count, oldestWaitingStepAt: waiting.oldestAt, degradedRuns }
  }, PROBE_SNAPSHOT_MS)
  const readiness = createSnapshot(async () => {
    let database = await db.ping()
    let pending = 0
    if (database) {
      try {
        pending = (await pendingMigrations(db)).length
      } catch {
        database = false
      }
    }
    return { database, pending }
  }, PROBE_SNAPSHOT_MS)
  // Rendering the page is CPU on the event loop the runner shares: a flood of
  // scrapes renders it once per second, not once per scrape.
  const metricsPage = createSnapshot(() => metrics.render(), 1000)
  metrics.setRunsByStatusSource(() => runCountsSnapshot.get())
  metrics.setAttentionSource(() => attention.get())

  async function probe(
    route: '/healthz' | '/readyz' | '/metrics',
    req: IncomingMessage,
    res: ServerResponse,
  ) {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD')
      sendJson(res, 405, { ok: false, error: 'Use GET.' })
      return
    }
    if (route === '/healthz') {
      sendJson(res, 200, { ok: true })
      return
    }
    if (route === '/readyz') {
      const reasons: string[] = []
      const { database, pending } = await readiness.get()
      if (!database) reasons.push('the database does not answer')
      if (pending > 0) reasons.push(`${pending} migration(s) pending`)
      if (deps.isStopping()) reasons.push('shutting down')
      sendJson(res, reasons.length === 0 ? 200 : 503, {
        ok: reasons.length === 0,
        database,
        pendingMigrations: pending,
        reasons,
      })
      return
    }
    const { contentType, body } = await metricsPage.get()
    res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' })
    res.end(body)
  }
  return probe
}
