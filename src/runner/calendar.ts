/**
 * Blackout calendars: named sets of local dates in one zone (single days,
 * ranges, and yearly days such as 12-25) on which a definition observing the
 * calendar has no occurrence. Pure functions; the tables are in sql/calendars.ts.
 *
 * A calendar's days are read in the calendar's own zone, not the definition's:
 * "no show on German public holidays" means the German date, wherever the
 * show's schedule is written. Days are whole local days, so a spring-forward
 * day (23 hours) or a fall-back day (25) is blacked out from its local
 * midnight to the next.
 */
import type { CalendarEntryRow, CalendarRow, NewCalendar } from '../../sql/calendars.ts'
import * as calendarsSql from '../../sql/calendars.ts'
import type { Queryable } from '../../sql/db.ts'
import type { OverrideRow } from '../../sql/occurrenceOverrides.ts'
import * as overridesSql from '../../sql/occurrenceOverrides.ts'
import { badInput } from '../errors.ts'
import { canonicalTimezone } from './schedule.ts'

/** Entries one calendar may hold, at most. */
export const MAX_CALENDAR_ENTRIES = 1000
const NAME = /^[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,98}[A-Za-z0-9])?$/
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/

/** A calendar entry as the API gives it. */
export interface CalendarEntryInput {
  from: string
  to?: string | null
  yearly?: boolean | null
  label?: string | null
}

export interface CalendarInput {
  name: string
  timezone: string
  entries: CalendarEntryInput[]
}

function validDate(text: string): boolean {
  const m = DATE.exec(text)
  if (!m) return false
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])]
  const date = new Date(Date.UTC(y, mo - 1, d))
  return date.getUTCFullYear() === y && date.getUTCMonth() === mo - 1 && date.getUTCDate() === d
}

/**
 * Check and normalise a calendar: every problem named by its path
 * (`entries[2].to: …`), refused together as BAD_USER_INPUT.
 */
export function validateCalendar(input: CalendarInput): NewCalendar {
  const problems: string[] = []
  if (typeof input.name !== 'string' || !NAME.test(input.name))
    problems.push(
      'name: 1–100 letters, digits, spaces, ".", "_" or "-", starting and ending with a letter or digit',
    )
  const timezone = typeof input.timezone === 'string' ? canonicalTimezone(input.timezone) : null
  if (timezone === null)
    problems.push(
      `timezone: ${JSON.stringify(input.timezone)} is not an IANA time zone (e.g. "Europe/Berlin")`,
    )
  if (input.entries.length > MAX_CALENDAR_ENTRIES)
    problems.push(`entries: at most ${MAX_CALENDAR_ENTRIES} entries (got ${input.entries.length})`)
  const entries: CalendarEntryRow[] = []
  input.entries.slice(0, MAX_CALENDAR_ENTRIES).forEach((e, i) => {
    const to = e.to ?? e.from
    const yearly = e.yearly === true
    const path = `entries[${i}]`
    let ok = true
    for (const [field, value] of [
      ['from', e.from],
      ['to', to],
    ] as const) {
      if (typeof value !== 'string' || !validDate(value)) {
        problems.push(`${path}.${field}: ${JSON.stringify(value)} is not a date YYYY-MM-DD`)
        ok = false
      }
    }
    // A yearly range may wrap the new year (12-24 to 01-02); a dated one may not run backwards.
    if (ok && !yearly && to < e.from) {
      problems.push(`${path}.to: ${to} is before from ${e.from}`)
      ok = false
    }
    if (e.label != null && e.label.length > 200) {
      problems.push(`${path}.label: at most 200 characters`)
      ok = false
    }
    if (ok) entries.push({ from: e.from, to, yearly, label: e.label ?? null })
  })
  if (problems.length > 0) throw badInput(`Invalid calendar: ${problems.join('; ')}`, { problems })
  return { name: input.name, timezone: timezone as string, entries }
}

const dayFormatters = new Map<string, Intl.DateTimeFormat>()

/** The local date (YYYY-MM-DD) of an instant in a zone. */
export function localDate(instant: Date | number, timezone: string): string {
  let f = dayFormatters.get(timezone)
  if (!f) {
    // en-CA formats as YYYY-MM-DD.
    f = new Intl.DateTimeFormat('en-CA', {
      timeZone: timezone,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
    })
    dayFormatters.set(timezone, f)
  }
  return f.format(instant)
}

function entryCovers(entry: CalendarEntryRow, day: string): boolean {
  if (!entry.yearly) return entry.from <= day && day <= entry.to
  const md = day.slice(5)
  const from = entry.from.slice(5)
  const to = entry.to.slice(5)
  return from <= to ? from <= md && md <= to : md >= from || md <= to
}

/** What blacks an instant out: the first calendar and entry covering its local day, or null. */
export interface Blackout {
  calendar: CalendarRow
  entry: CalendarEntryRow
}

export function blackoutOf(calendars: readonly CalendarRow[], instant: Date | number): Blackout | null {
  for (const calendar of calendars) {
    const day = localDate(instant, calendar.timezone)
    const entry = calendar.entries.find((e) => entryCovers(e, day))
    if (entry) return { calendar, entry }
  }
  return null
}

/** The reason `upcoming` gives a blacked-out occurrence: the entry's label, else the calendar's name. */
export function blackoutReason(b: Blackout): string {
  return (
    b.entry.label ??
    `${b.calendar.name}: ${b.entry.from}${b.entry.to !== b.entry.from ? ` to ${b.entry.to}` : ''}`
  )
}

/**
 * What keeps an occurrence of one definition from being made at its instant:
 * its calendars and the occurrences people skipped or moved.
 */
export interface OccurrenceExceptions {
  calendars: readonly CalendarRow[]
  /** By `scope|original epoch ms`. */
  overrides: ReadonlyMap<string, OverrideRow>
}

export const NO_EXCEPTIONS: OccurrenceExceptions = { calendars: [], overrides: new Map() }

export function overrideKey(scope: string, at: Date | number): string {
  return `${scope}|${typeof at === 'number' ? at : at.getTime()}`
}

export function exceptionsOf(
  calendars: readonly CalendarRow[],
  overrides: readonly OverrideRow[],
): OccurrenceExceptions {
  return { calendars, overrides: new Map(overrides.map((o) => [overrideKey(o.scope, o.originalAt), o])) }
}

/**
 * Where the run of one occurrence belongs: its own instant, the instant it was
 * moved to, or nowhere (blacked out or skipped). A person's move wins over a
 * blackout: it was chosen for that day.
 */
export function placeOf(ex: OccurrenceExceptions, scope: string, at: Date): Date | null {
  const o = ex.overrides.get(overrideKey(scope, at))
  if (o?.status === 'skipped') return null
  if (o?.status === 'moved') return o.movedTo
  return blackoutOf(ex.calendars, at) ? null : at
}

/**
 * The exceptions of these definitions for occurrences in `(after, until]`, in
 * two queries however many definitions; definitions with none are absent.
 */
export async function loadExceptions(
  db: Queryable,
  definitionIds: readonly number[],
  after: Date,
  until: Date,
): Promise<Map<number, OccurrenceExceptions>> {
  // One after the other: `db` may be a transaction's connection.
  const calendars = await calendarsSql.ofDefinitions(db, definitionIds)
  const overrides = await overridesSql.inRange(db, definitionIds, after, until)
  const out = new Map<number, OccurrenceExceptions>()
  const ids = new Set([...calendars.keys(), ...overrides.map((o) => o.definitionId)])
  for (const id of ids)
    out.set(
      id,
      exceptionsOf(
        calendars.get(id) ?? [],
        overrides.filter((o) => o.definitionId === id),
      ),
    )
  return out
}
