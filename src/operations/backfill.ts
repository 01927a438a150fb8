/**
 * Backfill: make the runs of a past (or any) period of a definition's
 * schedule, the way Temporal's schedule backfill and Dagster's backfills do.
 *
 * Every occurrence in `[from, to)` (the same instants `nextOccurrences` gives,
 * DST rule and `startsAt`/`endsAt` included) for each scope becomes a run,
 * idempotent on the occurrence key: an occurrence that already has a run is
 * counted as existing and left as it is. New runs carry the caller as
 * `startedBy`, are due at once when their instant has passed, and are grace
 * exempt: started however late, never missed for lateness. They start under
 * the definition's overlap policy and concurrency key like any other run.
 */
import * as audit from '../../sql/auditLog.ts'
import type { Db, Queryable } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { NewRun, RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import { AppError, badInput, conflict, notFound } from '../errors.ts'
import { refusals } from '../refusalSampler.ts'
import { loadExceptions, NO_EXCEPTIONS, type OccurrenceExceptions, placeOf } from '../runner/calendar.ts'
import { newRun } from '../runner/newRun.ts'
import { occurrenceStream } from '../runner/schedule.ts'
import type { RunQuota } from '../runQuota.ts'

/** Occurrences (instant × scope) one call may make, at most. */
export const MAX_BACKFILL_OCCURRENCES = 1000

export interface BackfillInput {
  definitionId: number
  from: Date
  to: Date
  /** @default the definition's scopes */
  scopes?: string[] | null
  actor: string
}

export interface BackfillResult {
  created: number
  existing: number
  runs: RunListRow[]
}

export interface BackfillDeps {
  db: Db
  /** Wake the local runner so due runs start now. */
  nudge?: () => void
  /** Runs per principal per minute (MAX_RUNS_PER_MINUTE); none in library use. */
  quota?: RunQuota
}

/** Make the runs of every occurrence in `[from, to)`; audited with the actor, refusals included. */
export async function backfillRuns(deps: BackfillDeps, input: BackfillInput): Promise<BackfillResult> {
  try {
    const result = await backfill(deps, input)
    await audit.record(deps.db, {
      actor: input.actor,
      action: 'backfillRuns',
      targetType: 'definition',
      targetId: String(input.definitionId),
      outcome: 'ok',
      detail: {
        from: input.from.toISOString(),
        to: input.to.toISOString(),
        scopes: input.scopes ?? null,
        created: result.created,
        existing: result.existing,
      },
    })
    return result
  } catch (err) {
    // Sampled per actor: a flood of refused backfills (a quota, a typo in a loop) is counted, not written row by row.
    const suppressed = err instanceof AppError ? refusals.take(`backfillRuns|${input.actor}`) : null
    if (err instanceof AppError && suppressed !== null) {
      await audit.record(deps.db, {
        actor: input.actor,
        action: 'backfillRuns',
        targetType: 'definition',
        targetId: String(input.definitionId).slice(0, 100),
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000), ...(suppressed > 0 && { suppressed }) },
      })
    }
    throw err
  }
}

async function backfill(deps: BackfillDeps, input: BackfillInput): Promise<BackfillResult> {
  const { from, to } = input
  if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime()))
    throw badInput('from and to must be valid ISO-8601 date-times.')
  if (from.getTime() >= to.getTime())
    throw badInput(
      `from (${from.toISOString()}) must be before to (${to.toISOString()}); the range is [from, to).`,
    )
  const def = await definitions.getById(deps.db, input.definitionId)
  if (!def) throw notFound('definition', input.definitionId)
  if (def.state === 'archived')
    throw conflict(`Definition "${def.slug}" is archived; set it ACTIVE or PAUSED to backfill.`)
  if (def.schedule === null)
    throw badInput(`Definition "${def.slug}" has no schedule, so it has no occurrences to backfill.`)
  if (def.currentVersionId === null) throw conflict(`Definition "${def.slug}" has no published version.`)
  const scopes = input.scopes ?? (def.scopes.length > 0 ? def.scopes : [''])
  if (scopes.length === 0) throw badInput('scopes: give at least one scope, or omit it for the definition’s.')
  if (new Set(scopes).size !== scopes.length) throw badInput('scopes: must not repeat a scope.')
  for (const [i, scope] of scopes.entries())
    if (scope.length > 191) throw badInput(`scopes[${i}]: at most 191 characters.`)

  // Lazily, and no further than the cap: a year of seconds is never listed.
  const instants: Date[] = []
  for (const t of occurrenceStream(def.schedule, def.timezone, new Date(from.getTime() - 1), def)) {
    if (t >= to.getTime()) break
    instants.push(new Date(t))
    if (instants.length * scopes.length > MAX_BACKFILL_OCCURRENCES) {
      throw badInput(
        `A backfill makes at most ${MAX_BACKFILL_OCCURRENCES} occurrences (instants × scopes) per call; [${from.toISOString()}, ${to.toISOString()}) over ${scopes.length} scope(s) has more. Split the range.`,
        { max: MAX_BACKFILL_OCCURRENCES },
      )
    }
  }
  // A blackout day or a skipped occurrence gets no run; a moved one is made where it went.
  // Read outside the transaction to size the call; read again inside it when a
  // skip, move or calendar change committed meanwhile (each bumps the
  // definition's exceptions revision under the guard this call also takes).
  const loadEx = async (db: Queryable) =>
    (await loadExceptions(db, [def.id], new Date(from.getTime() - 1), to)).get(def.id) ?? NO_EXCEPTIONS
  const rowsOf = (ex: OccurrenceExceptions): NewRun[] =>
    instants.flatMap((at) =>
      scopes.flatMap((scope) => {
        const place = placeOf(ex, scope, at)
        return place
          ? [newRun(def, { scope, scheduledFor: place, startedBy: input.actor, graceExempt: true })]
          : []
      }),
    )
  const rows = rowsOf(await loadEx(deps.db))
  const placeKey = (r: { scope: string; scheduledFor: Date }) => `${r.scope}|${r.scheduledFor.getTime()}`
  const inRange = () => runs.occurrencesInRange(deps.db, def.id, scopes, from, to)
  const beforeRows = await inRange()
  const before = new Set(beforeRows.map((r) => r.id))
  const wantedAtFirst = new Set(rows.map(placeKey))
  let written = rows
  // What this call would add counts against the caller's runs per minute.
  await deps.quota?.take(
    input.actor,
    rows.length - beforeRows.filter((r) => wantedAtFirst.has(placeKey(r))).length,
  )
  // After writing the definition's guard, so an archive cannot slip in between
  // (see eventDefinitions.setState); safe to repeat when it loses that race
  // through another cluster node: a second attempt inserts what is still missing.
  const created = await deps.db.transaction(
    async (tx) => {
      if ((await definitions.lockForNewRuns(tx, def.id)) === 'archived')
        throw conflict(`Definition "${def.slug}" is archived; set it ACTIVE or PAUSED to backfill.`)
      const fresh = (await definitions.exceptionsRevOf(tx, def.id)) === def.exceptionsRev
      written = fresh ? rows : rowsOf(await loadEx(tx))
      return runs.materialiseMany(tx, written)
    },
    { retryable: true },
  )
  const wanted = new Set(written.map(placeKey))
  const all = (await inRange()).filter((r) => wanted.has(placeKey(r)))
  const made = all.filter((r) => !before.has(r.id))
  await logs.appendMany(
    deps.db,
    made.map((r) => ({
      runId: r.id,
      message: `backfilled by ${input.actor} for ${r.scheduledFor.toISOString()}`,
      actor: input.actor,
      data: { backfill: true, from: from.toISOString(), to: to.toISOString() },
    })),
  )
  if (created > 0) deps.nudge?.()
  return { created, existing: written.length - created, runs: all }
}
