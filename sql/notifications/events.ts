/**
 * `notification_events`: the outbox. {@link emit} is called inside the
 * transaction of the change that made the event, so the event exists exactly
 * when the change does. It writes nothing unless an enabled channel listens
 * for the event (a server without channels pays one index-less probe of a
 * table of a few rows), and it writes the event's deliveries, one per
 * matching channel, in the same transaction.
 */
import { randomUUID } from 'node:crypto'
import type { Queryable, SqlValue, Statement } from '../db.ts'
import { chunkRows, placeholders, toJson } from '../json.ts'

export interface NewEvent {
  type: string
  runId: number | null
  stepId: number | null
  /** What makes the event happen once, e.g. `cue:17:reminder:2`. */
  dedupeKey: string
  payload: Record<string, unknown>
  occurredAt: Date
  /** The run's definition; a channel with definitionIds narrows on it. */
  definitionId: number | null
  /** A cue's assigned teams (names without `team:`); null for run events, which teams do not narrow. */
  cueTeams: readonly string[] | null
  /** A rehearsal's events are recorded as delivered and sent nowhere. */
  rehearsal: boolean
}

/** The channels an event reaches: enabled, listening for its type, and not narrowed away. */
const MATCH = `c.enabled = 1 AND JSON_CONTAINS(c.events, JSON_QUOTE(?))
  AND (c.definition_ids IS NULL OR ? IS NULL OR JSON_CONTAINS(c.definition_ids, ?))
  AND (? = 0 OR c.teams IS NULL OR JSON_OVERLAPS(c.teams, ?))`

function matchArgs(e: NewEvent): (string | number | null)[] {
  const def = e.definitionId === null ? null : String(e.definitionId)
  return [e.type, def, def, e.cueTeams === null ? 0 : 1, toJson(e.cueTeams ?? [])]
}

/**
 * next_attempt_at, give_up_at and delivered_at of a new delivery, on the
 * database's clock (the dispatcher compares them with NOW(3)): due at once and
 * retried for 24 hours; a rehearsal's is delivered at once and never sent.
 */
function dueColumns(rehearsal: string): string {
  return `IF(${rehearsal} = 1, NULL, NOW(3)), IF(${rehearsal} = 1, NULL, NOW(3) + INTERVAL 24 HOUR), IF(${rehearsal} = 1, NOW(3), NULL)`
}
const DUE = dueColumns('?')

/**
 * A new delivery's status, rehearsal, next_attempt_at, give_up_at and
 * delivered_at, from the SQL expression `rehearsal` (1 or 0) of a statement
 * that makes deliveries set-wise: a rehearsal's is recorded as delivered.
 */
export function newDeliveryColumns(rehearsal: string): string {
  return `IF(${rehearsal} = 1, 'DELIVERED', 'PENDING'), ${rehearsal}, ${dueColumns(rehearsal)}`
}
function dueArgs(e: NewEvent): number[] {
  const r = e.rehearsal ? 1 : 0
  return [r, r, r]
}

/** A fresh public event id (`webhook-id`). */
export function newEventId(): string {
  return `evt_${randomUUID().replaceAll('-', '')}`
}

/**
 * Write the event and its deliveries when a channel listens; answers how many
 * deliveries were made (0: nobody listens, or the event was already written).
 */
export async function emit(tx: Queryable, e: NewEvent): Promise<number> {
  const [event, deliveries] = emitStatements(e)
  const inserted = await tx.run(event.sql, event.params)
  if (inserted.affectedRows !== 1) return 0
  const made = await tx.run(deliveries.sql, deliveries.params)
  return made.affectedRows
}

/** The event's row, written only when an enabled channel listens for it. */
function eventInsert(e: NewEvent, eventId: string): Statement {
  return {
    sql: `INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     SELECT ?, ?, ?, ?, ?, ?, ? FROM DUAL
      WHERE EXISTS (SELECT 1 FROM notification_channels c WHERE ${MATCH})`,
    params: [
      eventId,
      e.type,
      e.runId,
      e.stepId,
      e.dedupeKey.slice(0, 191),
      toJson({ ...e.payload, id: eventId }),
      e.occurredAt,
      ...matchArgs(e),
    ],
  }
}

/**
 * {@link emit} as two statements for a batch, where the event's row id is not
 * known between them: the deliveries find the event by its public id, so an
 * event not written (nobody listens, or its dedupe key was used) gets none.
 * The second statement's affected rows are the deliveries made.
 */
export function emitStatements(e: NewEvent): [Statement, Statement] {
  const eventId = newEventId()
  return [
    eventInsert(e, eventId),
    {
      sql: `INSERT IGNORE INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
     SELECT ev.id, c.id, ?, IF(? = 1, 'DELIVERED', 'PENDING'), ?, ${DUE}
       FROM notification_events ev JOIN notification_channels c ON ${MATCH}
      WHERE ev.event_id = ?`,
      params: [e.runId, e.rehearsal ? 1 : 0, e.rehearsal ? 1 : 0, ...dueArgs(e), ...matchArgs(e), eventId],
    },
  ]
}

/**
 * The same match as {@link MATCH}, against the row `v` of a VALUES list
 * (columns type, def, narrow, teams) instead of arguments: many events at once.
 */
const MATCH_ROW = `c.enabled = 1 AND JSON_CONTAINS(c.events, JSON_QUOTE(v.type))
  AND (c.definition_ids IS NULL OR v.def IS NULL OR JSON_CONTAINS(c.definition_ids, v.def))
  AND (v.narrow = 0 OR c.teams IS NULL OR JSON_OVERLAPS(c.teams, v.teams))`

/** A VALUES list of `rows` (each `width` values) named `v (columns)`, as a WITH clause. */
function valuesOf(columns: string, width: number, rows: number): string {
  const row = `(${placeholders(width)})`
  return `WITH v (${columns}) AS (VALUES ${Array.from({ length: rows }, () => row).join(', ')})`
}

/**
 * {@link emit} for many events in one transaction, set-wise: one INSERT of the
 * events (those some channel listens for) and one of their deliveries, per
 * chunk of a few thousand, whatever the number of events. An event whose
 * dedupe key was already used is skipped with its deliveries, as with
 * {@link emit}. Answers how many deliveries were made.
 */
export async function emitMany(tx: Queryable, list: readonly NewEvent[]): Promise<number> {
  let made = 0
  for (const [events, deliveries] of emitManyStatements(list)) {
    const inserted = await tx.runQuery(events.sql, events.params)
    if (inserted.affectedRows === 0) continue
    made += (await tx.runQuery(deliveries.sql, deliveries.params)).affectedRows
  }
  return made
}

/**
 * {@link emitMany} as statements for a batch: per chunk, the events' INSERT
 * and their deliveries'. The deliveries find the events by the public ids
 * made here, so an event not written (nobody listens, or its dedupe key was
 * used) gets none, and the pair can be sent together. Each pair's second
 * statement's affected rows are the deliveries it made.
 */
export function emitManyStatements(list: readonly NewEvent[]): [Statement, Statement][] {
  return chunkRows(list, (e) => 2 * JSON.stringify(e.payload).length + 256).map((chunk) => {
    const eventArgs: SqlValue[] = []
    const matchArgs: SqlValue[] = []
    for (const e of chunk) {
      const id = newEventId()
      const def = e.definitionId === null ? null : String(e.definitionId)
      const narrow = e.cueTeams === null ? 0 : 1
      const teams = toJson(e.cueTeams ?? [])
      eventArgs.push(
        id,
        e.type,
        e.runId,
        e.stepId,
        e.dedupeKey.slice(0, 191),
        toJson({ ...e.payload, id }),
        e.occurredAt,
        def,
        narrow,
        teams,
      )
      matchArgs.push(id, e.type, e.runId, e.rehearsal ? 1 : 0, def, narrow, teams)
    }
    return [
      {
        sql: `INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
       ${valuesOf('event_id, type, run_id, step_id, dedupe_key, payload, occurred_at, def, narrow, teams', 10, chunk.length)}
       SELECT v.event_id, v.type, v.run_id, v.step_id, v.dedupe_key, v.payload, v.occurred_at FROM v
        WHERE EXISTS (SELECT 1 FROM notification_channels c WHERE ${MATCH_ROW})`,
        params: eventArgs,
      },
      {
        // Only the events the first statement wrote carry the ids just made (a skipped one keeps its own).
        sql: `INSERT IGNORE INTO notification_deliveries
              (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
       ${valuesOf('event_id, type, run_id, rehearsal, def, narrow, teams', 7, chunk.length)}
       SELECT e.id, c.id, v.run_id, ${newDeliveryColumns('v.rehearsal')}
         FROM v JOIN notification_events e ON e.event_id = v.event_id
         JOIN notification_channels c ON ${MATCH_ROW}`,
        params: matchArgs,
      },
    ]
  })
}

/**
 * An event for one channel only, whatever it listens for (`testNotificationChannel`,
 * and RUN_LATE_START, whose threshold is the channel's). Answers the delivery's
 * id, or null when the dedupe key was already used.
 */
export async function emitFor(tx: Queryable, channelId: number, e: NewEvent): Promise<number | null> {
  const eventId = newEventId()
  const inserted = await tx.run(
    `INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     VALUES (?, ?, ?, ?, ?, ?, ?)`,
    [
      eventId,
      e.type,
      e.runId,
      e.stepId,
      e.dedupeKey.slice(0, 191),
      toJson({ ...e.payload, id: eventId }),
      e.occurredAt,
    ],
  )
  if (inserted.affectedRows !== 1) return null
  const made = await tx.run(
    `INSERT INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
     VALUES (?, ?, ?, ?, ?, ${DUE})`,
    [
      inserted.insertId,
      channelId,
      e.runId,
      e.rehearsal ? 'DELIVERED' : 'PENDING',
      e.rehearsal ? 1 : 0,
      ...dueArgs(e),
    ],
  )
  return made.insertId
}
