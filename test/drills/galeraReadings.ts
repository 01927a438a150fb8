/**
 * What the Galera drill (galera.drill.ts) reads back from the database about
 * its definitions' runs: how many had ended by a moment; once the runs are
 * drained, the runs each occurrence got and how they ended, the webhook steps
 * run against the calls its receiver counted, overlaps of a concurrency key in
 * the runs' own start and end times, who finished runs (and since when), and
 * why runs failed, were missed or were cancelled. Queries only: the verdicts
 * are the drill's.
 */
import type { Db } from '../../sql/db.ts'
import { placeholders } from '../../sql/json.ts'
import type { WebhookReceiver } from '../helpers/runnerHarness.ts'
import { DEFS } from './galeraSchedules.ts'

/** Runs of these definitions that ended, by now. */
export async function countFinished(db: Db, defIds: number[]): Promise<number> {
  const [row] = await db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id IN (${placeholders(defIds.length)})
        AND status IN ('completed','cancelled','failed','missed')`,
    defIds,
  )
  return Number(row?.n ?? 0)
}

/**
 * Per definition of DEFS (`defIds` in the same order), up to `cutoff`: the
 * scopes with runs, the runs each scope should have, the runs each has,
 * duplicates (two runs for one instant) and the runs by status.
 */
export async function occurrencesUpTo(db: Db, defIds: number[], cutoff: Date) {
  const occurrences = []
  for (const [i, d] of DEFS.entries()) {
    const defId = defIds[i] as number
    const rows = await db.query<{
      scope: string
      n: number
      distinct_at: number
      first: Date
      last: Date
    }>(
      `SELECT scope, COUNT(*) AS n, COUNT(DISTINCT scheduled_for) AS distinct_at,
              MIN(scheduled_for) AS first, MAX(scheduled_for) AS last
         FROM event_runs WHERE definition_id = ? AND rehearsal = 0 AND scheduled_for <= ? GROUP BY scope`,
      [defId, cutoff],
    )
    // The first pass materialises from the moment it ran; from there on, every instant.
    const first = Math.min(...rows.map((r) => new Date(r.first).getTime()))
    const expectedPerScope = Math.floor((cutoff.getTime() - first) / d.periodMs) + 1
    const byStatus = await db.query<{ status: string; n: number }>(
      `SELECT status, COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND scheduled_for <= ? GROUP BY status`,
      [defId, cutoff],
    )
    occurrences.push({
      slug: d.slug,
      scopes: rows.length,
      expectedPerScope,
      runsPerScope: rows.map((r) => Number(r.n)),
      duplicates: rows.reduce((n, r) => n + Number(r.n) - Number(r.distinct_at), 0),
      byStatus: Object.fromEntries(byStatus.map((r) => [r.status, Number(r.n)])),
    })
  }
  return occurrences
}

/**
 * The webhook steps these definitions' runs attempted, against the calls the
 * receiver counted per Idempotency-Key (`${run id}-${step id}`): keys called
 * more than once, keys no step accounts for, steps with no call, and the
 * attempts the steps record.
 */
export async function webhookEffects(db: Db, defIds: number[], receiver: WebhookReceiver) {
  const hookSteps = await db.query<{ id: number; run_id: number; attempts: number; status: string }>(
    `SELECT s.id, s.run_id, s.attempts, s.status FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
      WHERE r.definition_id IN (${placeholders(defIds.length)}) AND s.kind = 'core.webhook' AND s.attempts > 0`,
    defIds,
  )
  const stepKeys = new Set(hookSteps.map((s) => `${s.run_id}-${s.id}`))
  const perKey = receiver.countsByKey()
  const keysCalledTwice = [...perKey.entries()].filter(([, n]) => n > 1)
  const keysWithoutStep = [...perKey.keys()].filter((k) => !stepKeys.has(k))
  const stepsWithoutCall = [...stepKeys].filter((k) => !perKey.has(k))
  const attempts = hookSteps.reduce((n, s) => n + Number(s.attempts), 0)
  return { hookSteps, perKey, keysCalledTwice, keysWithoutStep, stepsWithoutCall, attempts }
}

/** Each run that started while another run holding the same concurrency key had not ended, from the runs' own times. */
export async function keyOverlaps(db: Db, defIds: number[]): Promise<string[]> {
  const keyed = await db.query<{ k: string; id: number; started_at: Date; ended_at: Date | null }>(
    `SELECT concurrency_key AS k, id, started_at, ended_at FROM event_runs
      WHERE definition_id IN (${placeholders(defIds.length)}) AND concurrency_key IS NOT NULL AND started_at IS NOT NULL
      ORDER BY concurrency_key, started_at, id`,
    defIds,
  )
  const overlaps: string[] = []
  for (let i = 1; i < keyed.length; i++) {
    const prev = keyed[i - 1] as (typeof keyed)[number]
    const cur = keyed[i] as (typeof keyed)[number]
    if (prev.k !== cur.k) continue
    if (prev.ended_at === null || new Date(cur.started_at) < new Date(prev.ended_at))
      overlaps.push(`${cur.k}: run ${cur.id} started before run ${prev.id} ended`)
  }
  return overlaps
}

/** Per actor (instance): the runs it finished (logged 'done'), and how many of them after `since`. */
export async function finishedByActor(db: Db, defIds: number[], since: Date) {
  return db.query<{ actor: string; n: number; after_back: number }>(
    `SELECT l.actor, COUNT(*) AS n, SUM(l.at > ?) AS after_back FROM event_run_logs l
       JOIN event_runs r ON r.id = l.run_id
      WHERE r.definition_id IN (${placeholders(defIds.length)}) AND l.message = 'done' GROUP BY l.actor ORDER BY l.actor`,
    [since, ...defIds],
  )
}

/** Why runs of these definitions failed, were missed or were cancelled: up to five reasons, with counts. */
export async function failureReasons(db: Db, defIds: number[]) {
  return db.query<{ last_error: string | null; n: number }>(
    `SELECT last_error, COUNT(*) AS n FROM event_runs WHERE definition_id IN (${placeholders(defIds.length)})
        AND status IN ('failed','missed','cancelled') GROUP BY last_error LIMIT 5`,
    defIds,
  )
}
