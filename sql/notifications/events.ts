/**
 * `notification_events`: the outbox. {@link emit} is called inside the
 * transaction of the change that made the event, so the event exists exactly
 * when the change does. It writes nothing unless an enabled channel listens
 * for the event (a server without channels pays one index-less probe of a
 * table of a few rows), and it writes the event's deliveries, one per
 * matching channel, in the same transaction.
 */
import { randomUUID } from 'node:crypto'
import type { Queryable } from '../db.ts'
import { toJson } from '../json.ts'

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
const DUE = `IF(? = 1, NULL, NOW(3)), IF(? = 1, NULL, NOW(3) + INTERVAL 24 HOUR), IF(? = 1, NOW(3), NULL)`
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
  const eventId = newEventId()
  const inserted = await tx.run(
    `INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     SELECT ?, ?, ?, ?, ?, ?, ? FROM DUAL
      WHERE EXISTS (SELECT 1 FROM notification_channels c WHERE ${MATCH})`,
    [
      eventId,
      e.type,
      e.runId,
      e.stepId,
      e.dedupeKey.slice(0, 191),
      toJson({ ...e.payload, id: eventId }),
      e.occurredAt,
      ...matchArgs(e),
    ],
  )
  if (inserted.affectedRows !== 1) return 0
  const made = await tx.run(
    `INSERT IGNORE INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
     SELECT ?, c.id, ?, IF(? = 1, 'DELIVERED', 'PENDING'), ?, ${DUE}
       FROM notification_channels c WHERE ${MATCH}`,
    [inserted.insertId, e.runId, e.rehearsal ? 1 : 0, e.rehearsal ? 1 : 0, ...dueArgs(e), ...matchArgs(e)],
  )
  return made.affectedRows
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
