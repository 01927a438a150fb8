/**
 * `calendars` and `definition_calendars`: named blackout calendars in a zone,
 * and which definitions observe which. Entries are stored as one JSON array;
 * a calendar is small (a few hundred days at most) and always read whole.
 */
import type { Queryable } from './db.ts'
import { parseJson, placeholders, toJson } from './json.ts'

/** One blackout entry: local dates YYYY-MM-DD, both inclusive; yearly ones match month and day. */
export interface CalendarEntryRow {
  from: string
  to: string
  yearly: boolean
  label: string | null
}

export interface CalendarRow {
  id: number
  name: string
  timezone: string
  entries: CalendarEntryRow[]
  createdAt: Date
  updatedAt: Date
}

export interface NewCalendar {
  name: string
  timezone: string
  entries: CalendarEntryRow[]
}

type Raw = Record<string, unknown>

const SELECT_CAL = 'SELECT c.id, c.name, c.timezone, c.entries, c.created_at, c.updated_at FROM calendars c'

function hydrate(row: Raw): CalendarRow {
  return {
    id: Number(row.id),
    name: String(row.name),
    timezone: String(row.timezone),
    entries: parseJson<CalendarEntryRow[]>(row.entries, []),
    createdAt: row.created_at as Date,
    updatedAt: row.updated_at as Date,
  }
}

/** Insert a calendar; a duplicate name surfaces as DB_ERRNO.DUP_ENTRY for the caller to map. */
export async function create(db: Queryable, cal: NewCalendar): Promise<number> {
  const res = await db.run('INSERT INTO calendars (name, timezone, entries) VALUES (?, ?, ?)', [
    cal.name,
    cal.timezone,
    toJson(cal.entries),
  ])
  return res.insertId
}

/** Replace a calendar's name, zone and entries; answers whether it exists. */
export async function update(db: Queryable, id: number, cal: NewCalendar): Promise<boolean> {
  const res = await db.run(
    'UPDATE calendars SET name = ?, timezone = ?, entries = ?, updated_at = NOW(3) WHERE id = ?',
    [cal.name, cal.timezone, toJson(cal.entries), id],
  )
  return res.affectedRows === 1
}

/**
 * Delete a calendar unless a definition observes it: answers 'deleted',
 * 'missing', or the number of definitions using it. The locking read and the
 * delete share one statement's worth of time in the caller's transaction.
 */
export async function deleteUnused(db: Queryable, id: number): Promise<'deleted' | 'missing' | number> {
  const [used] = await db.execute<Raw>(
    'SELECT COUNT(*) AS n FROM definition_calendars WHERE calendar_id = ? LOCK IN SHARE MODE',
    [id],
  )
  const n = Number(used?.n ?? 0)
  if (n > 0) return n
  const res = await db.run('DELETE FROM calendars WHERE id = ?', [id])
  return res.affectedRows === 1 ? 'deleted' : 'missing'
}

export async function getById(db: Queryable, id: number): Promise<CalendarRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_CAL} WHERE c.id = ?`, [id])
  return row ? hydrate(row) : null
}

/** Every calendar, by name. */
export async function list(db: Queryable): Promise<CalendarRow[]> {
  const rows = await db.execute<Raw>(`${SELECT_CAL} ORDER BY c.name`)
  return rows.map(hydrate)
}

/** Calendars by name; names that match none are absent from the answer. */
export async function getByNames(db: Queryable, names: readonly string[]): Promise<CalendarRow[]> {
  if (names.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_CAL} WHERE c.name IN (${placeholders(names.length)})`, [
    ...names,
  ])
  return rows.map(hydrate)
}

/** The calendars each of these definitions observes (definitions with none are absent). */
export async function ofDefinitions(
  db: Queryable,
  definitionIds: readonly number[],
): Promise<Map<number, CalendarRow[]>> {
  const out = new Map<number, CalendarRow[]>()
  if (definitionIds.length === 0) return out
  const rows = await db.query<Raw>(
    `SELECT dc.definition_id, c.id, c.name, c.timezone, c.entries, c.created_at, c.updated_at
       FROM definition_calendars dc JOIN calendars c ON c.id = dc.calendar_id
      WHERE dc.definition_id IN (${placeholders(definitionIds.length)})
      ORDER BY c.name`,
    [...definitionIds],
  )
  for (const row of rows) {
    const id = Number(row.definition_id)
    const list = out.get(id) ?? []
    list.push(hydrate(row))
    out.set(id, list)
  }
  return out
}

/** The definitions observing a calendar. */
export async function definitionsUsing(db: Queryable, calendarId: number): Promise<number[]> {
  const rows = await db.execute<Raw>(
    'SELECT definition_id FROM definition_calendars WHERE calendar_id = ? ORDER BY definition_id',
    [calendarId],
  )
  return rows.map((r) => Number(r.definition_id))
}

/** Make a definition observe exactly these calendars (ids). */
export async function setForDefinition(
  db: Queryable,
  definitionId: number,
  calendarIds: readonly number[],
): Promise<void> {
  await db.run('DELETE FROM definition_calendars WHERE definition_id = ?', [definitionId])
  if (calendarIds.length === 0) return
  await db.runQuery(
    `INSERT INTO definition_calendars (definition_id, calendar_id) VALUES ${calendarIds
      .map(() => '(?, ?)')
      .join(', ')}`,
    calendarIds.flatMap((id) => [definitionId, id]),
  )
}
