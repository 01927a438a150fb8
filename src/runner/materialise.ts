/**
 * Materialisation: turn each active definition's schedule into `scheduled` runs
 * ahead of time, one per occurrence per scope.
 *
 * Bounded per (definition, scope) twice: by the look-ahead horizon (24 h by
 * default) and by a count of runs ahead ({@link DEFAULT_MAX_RUNS_AHEAD}), so a
 * `* * * * * *` schedule keeps a rolling window of runs rather than 86,400 a
 * day ahead. Occurrences are read from the schedule lazily, one pass writes at
 * most that count per scope, and rows go out in statements of at most
 * {@link ROWS_PER_STATEMENT}: memory follows the bound, not the schedule.
 *
 * Never skips an instant: each scope's watermark (`schedule_watermarks`) moves
 * in the same transaction as the runs it covers, and only to the last instant
 * written, so a pass cut short by the count bound resumes exactly there.
 *
 * Cheap to repeat: the unique key makes writing an occurrence twice a no-op
 * rather than a duplicate, so two instances materialising at once is harmless.
 */
import type { Db } from '../../sql/db.ts'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { NewRun } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as watermarks from '../../sql/scheduleWatermarks.ts'
import { occurrencesAhead, rememberAhead } from './aheadCount.ts'
import { loadExceptions, NO_EXCEPTIONS, type OccurrenceExceptions, placeOf } from './calendar.ts'
import { newRun } from './newRun.ts'
import { occurrenceStream, occurrencesBetween } from './schedule.ts'

/** After downtime, occurrences older than this are not made (they would all be `missed`). */
const MAX_CATCH_UP_MS = 7 * 24 * 3600 * 1000
/**
 * Runs kept ahead per (definition, scope), at most. 1,000 keeps every schedule
 * of one run a minute or slower a whole day ahead at a 24 h horizon, and a
 * per-second schedule about 17 minutes ahead. Also the most one pass writes
 * per scope (catching up after downtime included).
 */
export const DEFAULT_MAX_RUNS_AHEAD = 1000
/** Rows per INSERT statement (and per short transaction). */
const ROWS_PER_STATEMENT = 2000

/** The runs one definition's schedule asks for in `(from, to]` (at most 20,000 instants). */
export function occurrenceRuns(def: DefinitionRow, from: Date, to: Date): NewRun[] {
  if (!def.schedule || def.currentVersionId === null) return []
  const instants = occurrencesBetween(def.schedule, def.timezone, from, to, 20_000, def)
  const scopes = def.scopes.length > 0 ? def.scopes : ['']
  return instants.flatMap((scheduledFor) => scopes.map((scope) => newScheduledRun(def, scope, scheduledFor)))
}

function newScheduledRun(def: DefinitionRow, scope: string, scheduledFor: Date): NewRun {
  return newRun(def, { scope, scheduledFor, startedBy: 'schedule' })
}

/** Options of {@link materialiseDefinition} and {@link materialiseAll}. */
export interface MaterialiseBounds {
  /** Look-ahead: no run later than now + this. */
  horizonMs: number
  /** Runs ahead of now per (definition, scope), at most. @default DEFAULT_MAX_RUNS_AHEAD */
  maxRunsAhead?: number
}

/** What one definition's pass did. */
export interface MaterialiseOutcome {
  /** Runs that were new. */
  created: number
  /**
   * The earliest scope watermark when the count bound (not the horizon) stopped
   * the pass, else null: the window ends there, so a pass is due well before.
   */
  windowEnd: Date | null
}

/**
 * The next instants of one group of scopes that share a watermark: from
 * `from` (exclusive) up to `to`, while fewer than `maxAhead` runs lie ahead of
 * `now` (counting those already made up to `from`), and at most `maxAhead` in
 * all. `capped` says whether the count stopped it.
 */
function nextInstants(
  def: DefinitionRow,
  from: Date,
  now: Date,
  to: Date,
  maxAhead: number,
): { instants: Date[]; capped: boolean } {
  // Exact whenever it is below the bound (aheadCount.ts), and so at every return below.
  let ahead = occurrencesAhead(def, from, now, maxAhead)
  const instants: Date[] = []
  if (ahead >= maxAhead) return { instants, capped: true }
  const done = (capped: boolean) => {
    rememberAhead(def, from, instants.at(-1) ?? from, now, ahead)
    return { instants, capped }
  }
  for (const t of occurrenceStream(def.schedule as string, def.timezone, from, def)) {
    if (t > to.getTime()) return done(false)
    instants.push(new Date(t))
    if (t > now.getTime()) ahead++
    if (ahead >= maxAhead || instants.length >= maxAhead) return done(true)
  }
  return done(false)
}

/** Materialise one definition, bounded as {@link MaterialiseBounds} says. */
export async function materialiseDefinition(
  db: Db,
  def: DefinitionRow,
  now: Date,
  bounds: MaterialiseBounds | number,
  exceptions?: OccurrenceExceptions,
): Promise<MaterialiseOutcome> {
  const { horizonMs, maxRunsAhead = DEFAULT_MAX_RUNS_AHEAD } =
    typeof bounds === 'number' ? { horizonMs: bounds } : bounds
  const outcome: MaterialiseOutcome = { created: 0, windowEnd: null }
  if (!def.schedule || def.currentVersionId === null) return outcome
  const to = new Date(now.getTime() + horizonMs)
  const floor = now.getTime() - MAX_CATCH_UP_MS
  // Blackout days and one-off changes: an instant they remove gets no run,
  // but the watermark still passes it (it was decided, not forgotten).
  let ex =
    exceptions ?? (await loadExceptions(db, [def.id], new Date(floor), to)).get(def.id) ?? NO_EXCEPTIONS
  // The revision `ex` is at least as new as (the definition row was read before it).
  let exRev = def.exceptionsRev
  const marks = await watermarks.watermarksOf(db, def.id)
  // Scopes that share a watermark (all of them, usually) share one walk of the schedule.
  const groups = new Map<number, string[]>()
  for (const scope of def.scopes.length > 0 ? def.scopes : ['']) {
    // No watermark yet (first pass, or the schedule changed): from now. Otherwise
    // from the watermark, so occurrences that fell in a downtime appear (and become missed).
    const from = Math.max(marks.get(scope)?.getTime() ?? now.getTime(), floor)
    const group = groups.get(from) ?? []
    group.push(scope)
    groups.set(from, group)
  }
  for (const [fromMs, scopes] of groups) {
    const { instants, capped } = nextInstants(def, new Date(fromMs), now, to, maxRunsAhead)
    const last = instants.at(-1)
    const reached = last ?? new Date(fromMs)
    if (capped && (outcome.windowEnd === null || reached < outcome.windowEnd)) outcome.windowEnd = reached
    if (last === undefined) continue
    const perStatement = Math.max(1, Math.floor(ROWS_PER_STATEMENT / instants.length))
    for (let i = 0; i < scopes.length; i += perStatement) {
      const slice = scopes.slice(i, i + perStatement)
      const rowsOf = (exceptions: OccurrenceExceptions) =>
        slice.flatMap((scope) =>
          instants.flatMap((at) => {
            const place = placeOf(exceptions, scope, at)
            return place ? [newScheduledRun(def, scope, place)] : []
          }),
        )
      const rowsFrom = ex
      const rows = rowsOf(rowsFrom)
      // One short transaction that first writes the definition's guard: a
      // pause or archive racing this pass either waits (or, through another
      // cluster node, loses at COMMIT) and then withdraws these runs, or wins
      // first and this pass writes nothing. The watermark moves with the runs
      // it covers, never ahead of them. Safe to repeat: run again after losing
      // a conflict, it inserts only what the winner did not.
      const made = await db.transaction(
        async (tx) => {
          if ((await definitions.lockForNewRuns(tx, def.id)) !== 'active') return null
          // A skip, a move or a calendar change committed since the exceptions
          // were read (each bumps the revision under this same guard): read
          // them again, so the pass never makes a run one of them withdrew.
          const rev = await definitions.exceptionsRevOf(tx, def.id)
          if (rev !== exRev) {
            ex = (await loadExceptions(tx, [def.id], new Date(floor), to)).get(def.id) ?? NO_EXCEPTIONS
            exRev = rev
          }
          // (A repeated attempt after a reload in an earlier one builds from the reloaded set too.)
          const batch = ex === rowsFrom ? rows : rowsOf(ex)
          const created = await runs.materialiseMany(tx, batch)
          await watermarks.advance(tx, def.id, slice, last)
          return created
        },
        { retryable: true },
      )
      if (made === null) return outcome
      outcome.created += made
    }
  }
  // Every scope reached the horizon: say so on the definition, so the next
  // passes skip it without reading its watermarks until the horizon moves on.
  if (outcome.windowEnd === null) await definitions.setWatermark(db, def.id, to)
  return outcome
}

/** What one pass over every definition did. */
export interface MaterialiseAllOutcome {
  created: number
  /**
   * When a count-bounded window (a dense schedule) has run half down: the
   * runner materialises again then rather than at its usual interval. Null when
   * every definition reaches its horizon.
   */
  refillAt: Date | null
}

/**
 * One materialisation pass over every active scheduled definition. A definition
 * whose schedule fails to evaluate is reported through `onError` and skipped, so
 * one bad row cannot stop the others.
 */
export async function materialiseAll(
  db: Db,
  now: Date,
  bounds: MaterialiseBounds | number,
  onError: (def: DefinitionRow, err: unknown) => void,
): Promise<MaterialiseAllOutcome> {
  const defs = await definitions.listMaterialisable(db)
  const out: MaterialiseAllOutcome = { created: 0, refillAt: null }
  const horizonMs = typeof bounds === 'number' ? bounds : bounds.horizonMs
  // Materialised to the horizon already (within a second): nothing to read.
  const pending = defs.filter(
    (def) =>
      !(def.materialisedThrough && def.materialisedThrough.getTime() >= now.getTime() + horizonMs - 1000),
  )
  if (pending.length === 0) return out
  // Every pending definition's calendars and one-off changes in two queries, not two each.
  const exceptions = await loadExceptions(
    db,
    pending.map((d) => d.id),
    new Date(now.getTime() - MAX_CATCH_UP_MS),
    new Date(now.getTime() + horizonMs),
  )
  for (const def of pending) {
    try {
      const { created, windowEnd } = await materialiseDefinition(
        db,
        def,
        now,
        bounds,
        exceptions.get(def.id) ?? NO_EXCEPTIONS,
      )
      out.created += created
      if (windowEnd) {
        const half = new Date(now.getTime() + Math.max(0, windowEnd.getTime() - now.getTime()) / 2)
        if (out.refillAt === null || half < out.refillAt) out.refillAt = half
      }
    } catch (err) {
      onError(def, err)
    }
  }
  return out
}
