/**
 * Calendar management (admin): create, update and delete named blackout
 * calendars, and which calendars a definition observes. A change to the days a
 * definition may run on re-plans its runs at once: never-started runs the
 * schedule made on a day now blacked out are withdrawn, and the occurrences a
 * change frees inside the horizon are made by the next materialisation pass.
 */
import * as audit from '../../sql/auditLog.ts'
import type { CalendarRow } from '../../sql/calendars.ts'
import * as calendars from '../../sql/calendars.ts'
import { DB_ERRNO, type Db, isDbErrno } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as overrides from '../../sql/occurrenceOverrides.ts'
import { AppError, badInput, conflict, notFound } from '../errors.ts'
import { blackoutOf, type CalendarInput, validateCalendar } from '../runner/calendar.ts'
import type { Clock } from '../runner/clock.ts'

export interface CalendarDeps {
  db: Db
  clock: Clock
  /** Ask the runner to materialise now (the days a definition may run on changed). */
  nudgeMaterialise?: () => void
}

/** Calendars a definition may observe, at most. */
export const MAX_DEFINITION_CALENDARS = 20

async function audited<T>(
  deps: CalendarDeps,
  actor: string,
  action: string,
  targetId: string,
  mutate: () => Promise<{ value: T; detail: Record<string, unknown> }>,
): Promise<T> {
  try {
    const { value, detail } = await mutate()
    await audit.record(deps.db, { actor, action, targetType: 'calendar', targetId, outcome: 'ok', detail })
    return value
  } catch (err) {
    if (err instanceof AppError) {
      await audit.record(deps.db, {
        actor,
        action,
        targetType: 'calendar',
        targetId: targetId.slice(0, 100),
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000) },
      })
    }
    throw err
  }
}

function duplicateName(err: unknown, name: string): never {
  if (isDbErrno(err, DB_ERRNO.DUP_ENTRY))
    throw conflict(`A calendar named "${name}" already exists; pick another name or update that one.`)
  throw err
}

export function createCalendar(
  deps: CalendarDeps,
  input: CalendarInput,
  actor: string,
): Promise<CalendarRow> {
  return audited(deps, actor, 'createCalendar', String(input.name).slice(0, 100), async () => {
    const cal = validateCalendar(input)
    const id = await calendars.create(deps.db, cal).catch((err) => duplicateName(err, cal.name))
    const row = (await calendars.getById(deps.db, id)) as CalendarRow
    return { value: row, detail: { id, name: cal.name, entries: cal.entries.length } }
  })
}

export function updateCalendar(
  deps: CalendarDeps,
  id: number,
  input: CalendarInput,
  actor: string,
): Promise<CalendarRow> {
  return audited(deps, actor, 'updateCalendar', String(id), async () => {
    const cal = validateCalendar(input)
    if (!(await calendars.getById(deps.db, id))) throw notFound('calendar', id)
    // The new days and the definitions' revision commit together (see materialise.ts).
    const users = await deps.db
      .transaction(async (tx) => {
        await calendars.update(tx, id, cal)
        const using = await calendars.definitionsUsing(tx, id)
        await definitions.bumpExceptions(tx, using)
        return using
      })
      .catch((err) => duplicateName(err, cal.name))
    let withdrawn = 0
    for (const definitionId of users) withdrawn += await replanDefinition(deps, definitionId)
    const row = (await calendars.getById(deps.db, id)) as CalendarRow
    return {
      value: row,
      detail: {
        name: cal.name,
        entries: cal.entries.length,
        definitions: users.length,
        withdrawnRuns: withdrawn,
      },
    }
  })
}

export function deleteCalendar(deps: CalendarDeps, id: number, actor: string): Promise<boolean> {
  return audited(deps, actor, 'deleteCalendar', String(id), async () => {
    const cal = await calendars.getById(deps.db, id)
    if (!cal) throw notFound('calendar', id)
    const outcome = await deps.db.transaction((tx) => calendars.deleteUnused(tx, id))
    if (outcome === 'missing') throw notFound('calendar', id)
    if (typeof outcome === 'number')
      throw conflict(
        `Calendar "${cal.name}" is used by ${outcome} definition${outcome === 1 ? '' : 's'}; remove it from ${outcome === 1 ? 'that definition' : 'them'} (updateDefinition calendars) first.`,
        { definitions: outcome },
      )
    return { value: true, detail: { name: cal.name } }
  })
}

/**
 * The calendar ids for these names, refused as BAD_USER_INPUT naming every
 * unknown one (nothing is written).
 */
export async function resolveCalendarNames(db: Db, names: readonly string[]): Promise<number[]> {
  if (names.length > MAX_DEFINITION_CALENDARS)
    throw badInput(`calendars: at most ${MAX_DEFINITION_CALENDARS} calendars per definition.`)
  if (new Set(names).size !== names.length) throw badInput('calendars: must not repeat a calendar.')
  const found = await calendars.getByNames(db, names)
  const byName = new Map(found.map((c) => [c.name, c.id]))
  const unknown = names.filter((n) => !byName.has(n))
  if (unknown.length > 0)
    throw badInput(
      `calendars: no calendar named ${unknown.map((n) => JSON.stringify(n.slice(0, 100))).join(', ')}; create it first (createCalendar).`,
      { unknown },
    )
  return names.map((n) => byName.get(n) as number)
}

/** Make a definition observe exactly these calendars, then re-plan its runs; answers how many were withdrawn. */
export async function setDefinitionCalendars(
  deps: CalendarDeps,
  definitionId: number,
  calendarIds: readonly number[],
): Promise<number> {
  await deps.db.transaction(async (tx) => {
    await calendars.setForDefinition(tx, definitionId, calendarIds)
    await definitions.bumpExceptions(tx, [definitionId])
  })
  return replanDefinition(deps, definitionId)
}

/**
 * After the days a definition may run on changed: withdraw its never-started,
 * schedule-made runs on a day now blacked out (a run a person moved there
 * stays: it was put on that day on purpose), and materialise afresh from now
 * so the occurrences freed inside the horizon are made.
 */
async function replanDefinition(deps: CalendarDeps, definitionId: number): Promise<number> {
  const now = deps.clock.now()
  const observed = (await calendars.ofDefinitions(deps.db, [definitionId])).get(definitionId) ?? []
  let withdrawn = 0
  if (observed.length > 0) {
    const future = await runs.futureScheduled(deps.db, definitionId, now)
    const latest = new Date(Math.max(now.getTime(), ...future.map((r) => r.scheduledFor.getTime())))
    const moved = await overrides.movedInto(deps.db, definitionId, new Date(now.getTime() - 1), latest)
    const movedHere = new Set(moved.map((o) => `${o.scope}|${o.movedTo?.getTime()}`))
    const dark = future
      .filter((r) => !movedHere.has(`${r.scope}|${r.scheduledFor.getTime()}`))
      .filter((r) => blackoutOf(observed, r.scheduledFor) !== null)
      .map((r) => r.id)
    // A transaction per batch: its log lines and the run go together, and a
    // run that starts meanwhile keeps both (sql/eventRuns/children.ts).
    for (let from = 0; from < dark.length; from += 500) {
      const batch = dark.slice(from, from + 500)
      withdrawn += await deps.db.transaction((tx) => runs.withdrawScheduled(tx, batch), { retryable: true })
    }
  }
  await definitions.replan(deps.db, definitionId)
  deps.nudgeMaterialise?.()
  return withdrawn
}
