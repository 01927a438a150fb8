/**
 * One occurrence, changed by a person: skipped (no run at all) or moved to
 * another instant, before or after its run is made. The occurrence keeps its
 * identity, its original instant: moving it again moves the same run again,
 * skipping it after a move withdraws the moved run. Nothing else changes: the
 * next occurrence, the materialisation watermark and other scopes are left as
 * they were. A moved run starts under the overlap policy and concurrency key
 * like any other, at its new time.
 *
 * Also `upcoming`: what the schedule will do next, occurrence by occurrence,
 * with blackout days, skips and moves shown.
 */
import * as audit from '../../sql/auditLog.ts'
import { DB_ERRNO, type Db, isDbErrno } from '../../sql/db.ts'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as overrides from '../../sql/occurrenceOverrides.ts'
import { AppError, badInput, conflict, notFound } from '../errors.ts'
import { blackoutOf, blackoutReason, loadExceptions, NO_EXCEPTIONS, overrideKey } from '../runner/calendar.ts'
import type { Clock } from '../runner/clock.ts'
import { newRun, resolveConcurrencyKey } from '../runner/newRun.ts'
import { occurrenceStream } from '../runner/schedule.ts'

export interface OccurrenceDeps {
  db: Db
  clock: Clock
  /** Wake the local runner (a moved run may be due now). */
  nudge?: () => void
}

export type OccurrenceStatus = 'scheduled' | 'blackout' | 'skipped' | 'moved'

/** One entry of `upcoming`, or what a skip or move answers. */
export interface Occurrence {
  at: Date
  scope: string
  status: OccurrenceStatus
  reason: string | null
  movedTo: Date | null
  run: RunListRow | null
}

export interface SkipInput {
  definitionId: number
  at: Date
  scope?: string | null
  reason: string
  actor: string
}

export interface MoveInput {
  definitionId: number
  at: Date
  to: Date
  scope?: string | null
  reason?: string | null
  actor: string
}

const MAX_REASON = 500

async function checkedOccurrence(
  db: Db,
  definitionId: number,
  at: Date,
  scopeArg: string | null | undefined,
): Promise<{ def: DefinitionRow; scope: string }> {
  if (Number.isNaN(at.getTime())) throw badInput('at must be a valid ISO-8601 date-time.')
  const def = await definitions.getById(db, definitionId)
  if (!def) throw notFound('definition', definitionId)
  if (def.state === 'archived')
    throw conflict(`Definition "${def.slug}" is archived; its occurrences cannot change.`)
  if (def.schedule === null)
    throw badInput(`Definition "${def.slug}" has no schedule, so it has no occurrences to skip or move.`)
  const scope = scopeArg ?? ''
  const scopes = def.scopes.length > 0 ? def.scopes : ['']
  if (!scopes.includes(scope))
    throw badInput(
      `scope ${JSON.stringify(scope.slice(0, 100))} is not one of the definition's scopes (${scopes.map((s) => JSON.stringify(s)).join(', ')}).`,
    )
  const next = occurrenceStream(def.schedule, def.timezone, new Date(at.getTime() - 1), def).next()
  if (next.done || next.value !== at.getTime()) {
    const hint = next.done ? '' : ` The next one from then is ${new Date(next.value).toISOString()}.`
    throw badInput(`${at.toISOString()} is not an occurrence of "${def.slug}"'s schedule.${hint}`)
  }
  return { def, scope }
}

function checkedReason(reason: string | null | undefined, required: boolean): string | null {
  if (reason == null || reason.trim() === '') {
    if (required) throw badInput('reason: say why the occurrence is skipped (1–500 characters).')
    return null
  }
  if (reason.length > MAX_REASON) throw badInput(`reason: at most ${MAX_REASON} characters.`)
  return reason.trim()
}

function alreadyStarted(run: RunListRow, what: string): AppError {
  return conflict(
    `The run of this occurrence (run ${run.id}) is ${run.status.toUpperCase()}: it has started, so it cannot be ${what}; cancel it instead.`,
    { runId: String(run.id), status: run.status },
  )
}

async function audited<T>(
  db: Db,
  actor: string,
  action: string,
  targetId: number,
  work: () => Promise<{ value: T; detail: Record<string, unknown> }>,
): Promise<T> {
  try {
    const { value, detail } = await work()
    await audit.record(db, {
      actor,
      action,
      targetType: 'definition',
      targetId: String(targetId),
      outcome: 'ok',
      detail,
    })
    return value
  } catch (err) {
    if (err instanceof AppError)
      await audit.record(db, {
        actor,
        action,
        targetType: 'definition',
        targetId: String(targetId),
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000) },
      })
    throw err
  }
}

/**
 * Skip one occurrence: no run is made for it, and a made, never-started run
 * (where it is now, moved or not) is withdrawn. Idempotent.
 */
export function skipOccurrence(deps: OccurrenceDeps, input: SkipInput): Promise<Occurrence> {
  return audited(deps.db, input.actor, 'skipOccurrence', input.definitionId, async () => {
    const reason = checkedReason(input.reason, true) as string
    const { def, scope } = await checkedOccurrence(deps.db, input.definitionId, input.at, input.scope)
    const at = input.at
    const withdrawn = await deps.db.transaction(
      async (tx) => {
        // The same guard every run creator writes first: a materialisation pass
        // of this definition either finished before (and its run is withdrawn
        // here) or starts after and sees the skip.
        await definitions.lockForNewRuns(tx, def.id)
        const existing = await overrides.get(tx, def.id, scope, at, true)
        const place =
          existing?.status === 'moved' ? existing.movedTo : existing?.status === 'skipped' ? null : at
        const run = place ? await runs.findOccurrence(tx, def.id, scope, place) : null
        if (run && run.status !== 'scheduled') throw alreadyStarted(run, 'skipped')
        const gone = run ? await runs.withdrawScheduled(tx, [run.id]) : 0
        await overrides.put(tx, {
          definitionId: def.id,
          scope,
          originalAt: at,
          status: 'skipped',
          movedTo: null,
          reason,
          actor: input.actor,
        })
        await definitions.bumpExceptions(tx, [def.id])
        return gone
      },
      { retryable: true },
    )
    return {
      value: { at, scope, status: 'skipped', reason, movedTo: null, run: null },
      detail: { at: at.toISOString(), scope, reason, withdrawnRuns: withdrawn },
    }
  })
}

/**
 * Move one occurrence to `to`: its never-started run moves there (made there
 * now if it did not exist yet). Moving the same original instant again moves
 * the same run again; moving it back to its own instant undoes the move.
 */
export function moveOccurrence(deps: OccurrenceDeps, input: MoveInput): Promise<Occurrence> {
  return audited(deps.db, input.actor, 'moveOccurrence', input.definitionId, async () => {
    const reason = checkedReason(input.reason, false)
    const { to, at } = input
    if (Number.isNaN(to.getTime())) throw badInput('to must be a valid ISO-8601 date-time.')
    const { def, scope } = await checkedOccurrence(deps.db, input.definitionId, at, input.scope)
    const now = deps.clock.now()
    if (to.getTime() < now.getTime())
      throw badInput(`to (${to.toISOString()}) is in the past; move an occurrence to now or later.`)
    const back = to.getTime() === at.getTime()
    if (!back) {
      const clash = occurrenceStream(
        def.schedule as string,
        def.timezone,
        new Date(to.getTime() - 1),
        def,
      ).next()
      if (!clash.done && clash.value === to.getTime())
        throw conflict(
          `${to.toISOString()} is itself an occurrence of "${def.slug}"; move it elsewhere or skip one.`,
        )
    }
    const result = await deps.db.transaction(
      async (tx) => {
        const state = await definitions.lockForNewRuns(tx, def.id)
        const existing = await overrides.get(tx, def.id, scope, at, true)
        const other = back ? null : await overrides.movedTo(tx, def.id, scope, to)
        if (other && other.originalAt.getTime() !== at.getTime())
          throw conflict(
            `The occurrence of ${other.originalAt.toISOString()} was already moved to ${to.toISOString()} in this scope.`,
          )
        const place =
          existing?.status === 'moved' ? existing.movedTo : existing?.status === 'skipped' ? null : at
        const run = place ? await runs.findOccurrence(tx, def.id, scope, place) : null
        if (run && run.status !== 'scheduled') throw alreadyStarted(run, 'moved')
        const key = resolveConcurrencyKey(
          def.concurrencyKey,
          { scope, scheduledFor: to, params: run?.params ?? null },
          def,
        )
        let runId: number | null = run?.id ?? null
        try {
          if (run) {
            if (place?.getTime() !== to.getTime()) await runs.moveScheduled(tx, run.id, to, key)
          } else if (state === 'active' && def.currentVersionId !== null) {
            runId = await runs.materialise(
              tx,
              newRun(def, { scope, scheduledFor: to, startedBy: 'schedule' }),
            )
            if (runId === null) throw DUPLICATE
          }
        } catch (err) {
          if (err === DUPLICATE || isDbErrno(err, DB_ERRNO.DUP_ENTRY))
            throw conflict(
              `Scope ${JSON.stringify(scope)} already has a run at ${to.toISOString()}; pick another time.`,
            )
          throw err
        }
        if (back) await overrides.remove(tx, def.id, scope, at)
        else
          await overrides.put(tx, {
            definitionId: def.id,
            scope,
            originalAt: at,
            status: 'moved',
            movedTo: to,
            reason,
            actor: input.actor,
          })
        await definitions.bumpExceptions(tx, [def.id])
        return { runId, from: place }
      },
      { retryable: true },
    )
    if (result.runId !== null) {
      await logs.append(deps.db, {
        runId: result.runId,
        message: `occurrence ${at.toISOString()} ${back ? 'moved back' : `moved to ${to.toISOString()}`} by ${input.actor}${reason ? `: ${reason}` : ''}`,
        actor: input.actor,
        data: { action: 'moveOccurrence', at: at.toISOString(), to: to.toISOString(), reason },
      })
      deps.nudge?.()
    }
    const run = result.runId === null ? null : await runs.getById(deps.db, result.runId)
    const occurrence: Occurrence = back
      ? { at, scope, status: 'scheduled', reason: null, movedTo: null, run }
      : { at, scope, status: 'moved', reason, movedTo: to, run }
    return {
      value: occurrence,
      detail: {
        at: at.toISOString(),
        to: to.toISOString(),
        from: result.from?.toISOString() ?? null,
        scope,
        reason,
        runId: result.runId === null ? null : String(result.runId),
      },
    }
  })
}

const DUPLICATE = new Error('duplicate occurrence')

export interface UpcomingOptions {
  count: number
  after: Date
  scope?: string | null
}

/** Most entries `upcoming` answers. */
export const MAX_UPCOMING = 1000

/**
 * The next `count` entries of a definition's schedule after `after`: each
 * occurrence with what will happen to it (SCHEDULED with its run once made,
 * BLACKOUT with the entry's label, SKIPPED, MOVED with where it went), and each
 * moved occurrence again where it went (SCHEDULED, with its run).
 */
export async function upcoming(db: Db, def: DefinitionRow, opts: UpcomingOptions): Promise<Occurrence[]> {
  const { count, after } = opts
  if (!Number.isInteger(count) || count < 1 || count > MAX_UPCOMING)
    throw badInput(`count must be an integer from 1 to ${MAX_UPCOMING}; got ${count}.`)
  const all = def.scopes.length > 0 ? def.scopes : ['']
  if (opts.scope != null && !all.includes(opts.scope))
    throw badInput(`scope ${JSON.stringify(opts.scope.slice(0, 100))} is not one of the definition's scopes.`)
  const scopes = opts.scope != null ? [opts.scope] : all
  if (def.schedule === null) return []
  const instants: Date[] = []
  for (const t of occurrenceStream(def.schedule, def.timezone, after, def)) {
    instants.push(new Date(t))
    if (instants.length * scopes.length >= count) break
  }
  const last = instants.at(-1)
  if (last === undefined) return []
  const ex = (await loadExceptions(db, [def.id], after, last)).get(def.id) ?? NO_EXCEPTIONS
  const made = await runs.occurrencesInRange(
    db,
    def.id,
    scopes,
    new Date(after.getTime() + 1),
    new Date(last.getTime() + 1),
  )
  const runAt = new Map(made.map((r) => [overrideKey(r.scope, r.scheduledFor), r]))
  // A paused definition makes no run; its occurrences stay SCHEDULED (they
  // come back when it is ACTIVE again) but say why nothing will start.
  const pausedReason =
    def.state === 'paused' ? 'the definition is paused: no run is made until it is ACTIVE again' : null
  const out: Occurrence[] = []
  for (const at of instants)
    for (const scope of scopes) {
      const o = ex.overrides.get(overrideKey(scope, at))
      if (o?.status === 'skipped') {
        out.push({ at, scope, status: 'skipped', reason: o.reason, movedTo: null, run: null })
        continue
      }
      if (o?.status === 'moved') {
        const run = o.movedTo ? (runAt.get(overrideKey(scope, o.movedTo)) ?? null) : null
        out.push({ at, scope, status: 'moved', reason: o.reason, movedTo: o.movedTo, run })
        continue
      }
      const dark = blackoutOf(ex.calendars, at)
      if (dark)
        out.push({ at, scope, status: 'blackout', reason: blackoutReason(dark), movedTo: null, run: null })
      else
        out.push({
          at,
          scope,
          status: 'scheduled',
          reason: pausedReason,
          movedTo: null,
          run: runAt.get(overrideKey(scope, at)) ?? null,
        })
    }
  // Where moved occurrences went, inside the same stretch of time.
  for (const o of ex.overrides.values()) {
    if (o.status !== 'moved' || !o.movedTo || !scopes.includes(o.scope)) continue
    if (o.movedTo.getTime() <= after.getTime() || o.movedTo.getTime() > last.getTime()) continue
    out.push({
      at: o.movedTo,
      scope: o.scope,
      status: 'scheduled',
      reason: `moved from ${o.originalAt.toISOString()}${o.reason ? `: ${o.reason}` : ''}`,
      movedTo: null,
      run: runAt.get(overrideKey(o.scope, o.movedTo)) ?? null,
    })
  }
  out.sort((a, b) => a.at.getTime() - b.at.getTime() || a.scope.localeCompare(b.scope))
  return out.slice(0, count)
}
