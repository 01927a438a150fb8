/**
 * Run alerts (RUN_COMPLETED, RUN_FAILED, RUN_MISSED, RUN_DEGRADED), written
 * beside the statement that ended or degraded the runs, in its transaction,
 * set-wise: one INSERT of the events and one of their deliveries for the
 * whole statement, whatever the number of runs.
 *
 * Until migration 0027 a trigger on `event_runs` wrote them, a row at a time.
 * A trigger runs for every row of every UPDATE of the table (claims, leases,
 * wakes included), and even one whose test reads nothing cost MariaDB about
 * as much as the rest of the start's UPDATE. So the statements that end runs
 * say so instead: each stamps the runs it moves with a number of its own
 * (`alert_stamp`), and the two statements here read back exactly those runs
 * (by the same ids, and the stamp), so a run that was already ended, or moved
 * by someone else, is never alerted twice or by the wrong statement.
 *
 * While no enabled channel listens, both statements are empty at once: each
 * WHERE opens with `EXISTS (enabled channel)`, an uncorrelated subquery the
 * optimiser evaluates before it reads any table, and a false one is an
 * impossible WHERE. (A derived table of the enabled channels, joined first,
 * did the same at twice the cost: two temporary tables a statement; joined
 * where the optimiser put it, last, it read every run named.) The joins run
 * in the order written (STRAIGHT_JOIN): the runs by their ids first.
 */
import { randomInt } from 'node:crypto'
import type { SqlValue, Statement } from '../db.ts'
import type { RunHealth, RunStatus } from '../states.ts'
import { newDeliveryColumns } from './events.ts'

export type RunAlert = 'RUN_COMPLETED' | 'RUN_FAILED' | 'RUN_MISSED' | 'RUN_DEGRADED'

/** What a statement that moves runs must send after itself: the alert, and the stamp its rows carry. */
export interface AlertOwed {
  type: RunAlert
  stamp: number
}

/** The alert a move into `status` raises, or null (a cancel, a pause, a run still in flight). */
export function alertForStatus(status: RunStatus): RunAlert | null {
  if (status === 'completed') return 'RUN_COMPLETED'
  if (status === 'failed') return 'RUN_FAILED'
  if (status === 'missed') return 'RUN_MISSED'
  return null
}

/** The alert a change of health into `health` raises, or null. */
export function alertForHealth(health: RunHealth): RunAlert | null {
  return health === 'degraded' ? 'RUN_DEGRADED' : null
}

/**
 * A fresh stamp for one statement. Random, so two statements (of this or
 * another instance) never share one; 2^48 values, so the chance that a run
 * keeps an older statement's equal stamp is nil.
 */
export function newAlertStamp(): number {
  return randomInt(1, 2 ** 48)
}

/**
 * The runs a statement stamped: the same runs it was told to move (`sql`, a
 * condition with its arguments, on `r`, event_runs, read from `from`) that
 * now carry its stamp. `from` defaults to `event_runs r`; a statement that
 * names its runs by their steps reads them from the steps
 * (`event_run_steps s JOIN event_runs r ON r.id = s.run_id`), the steps
 * first, since the joins run in the order written.
 */
export interface StampedRuns {
  from?: string
  sql: string
  args: SqlValue[]
}

/** A channel that listens for the alert type `?` on run `r`'s definition. */
const LISTENS = `c.enabled = 1 AND JSON_CONTAINS(c.events, JSON_QUOTE(?))
  AND (c.definition_ids IS NULL OR JSON_CONTAINS(c.definition_ids, CAST(r.definition_id AS CHAR)))`

/** False while no channel is enabled: evaluated once, before any table is read. */
const ANY_LISTENING = 'EXISTS (SELECT 1 FROM notification_channels WHERE enabled = 1)'

/** An ISO-8601 UTC timestamp with milliseconds, as the API writes them (connections run at +00:00). */
const iso = (column: string) => `CONCAT(LEFT(DATE_FORMAT(${column}, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')`

/**
 * The event rows and their deliveries for the runs `owed.stamp` marks among
 * `which`. Send them after the statement that stamped the runs, in its
 * transaction. The second statement's affected rows are the deliveries made.
 */
export function runAlertStatements(owed: AlertOwed, which: StampedRuns): [Statement, Statement] {
  const type = owed.type
  const dottedType = `run.${type.slice(4).toLowerCase()}`
  const dedupeKey = `CONCAT('run:', r.id, ':', ${sqlString(type.toLowerCase())})`
  const from = which.from ?? 'event_runs r'
  const runs = `${which.sql} AND r.alert_stamp = ?`
  const runArgs: SqlValue[] = [...which.args, owed.stamp]
  return [
    {
      // The payload is the one the trigger's procedure wrote (docs/notifications.md).
      sql: `INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
     SELECT STRAIGHT_JOIN CONCAT('evt_', REPLACE(UUID(), '-', '')), ?, r.id, NULL, ${dedupeKey},
            JSON_OBJECT(
              'type', ?,
              'event', ?,
              'occurredAt', ${iso('NOW(3)')},
              'run', JSON_OBJECT(
                'id', CAST(r.id AS CHAR),
                'definition', JSON_OBJECT('id', CAST(r.definition_id AS CHAR), 'slug', d.slug, 'title', d.title),
                'scope', r.scope,
                'scheduledFor', ${iso('r.scheduled_for')},
                'rehearsal', IF(r.rehearsal = 1, JSON_EXTRACT('true', '$'), JSON_EXTRACT('false', '$')),
                'status', UPPER(r.status),
                'health', UPPER(r.health),
                'error', r.last_error),
              'step', NULL,
              'cue', NULL),
            NOW(3)
       FROM ${from}
       JOIN event_definitions d ON d.id = r.definition_id
      WHERE ${ANY_LISTENING} AND ${runs}
        AND EXISTS (SELECT 1 FROM notification_channels c WHERE ${LISTENS})
      ORDER BY r.id`,
      params: [type, dottedType, type, ...runArgs, type],
    },
    {
      // Only for an event this statement wrote: one written before (a run
      // degraded a second time) has its deliveries already, as the
      // procedure's ROW_COUNT() test kept it.
      sql: `INSERT IGNORE INTO notification_deliveries
            (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
     SELECT STRAIGHT_JOIN ev.id, c.id, r.id, ${newDeliveryColumns('r.rehearsal')}
       FROM ${from}
       JOIN notification_events ev ON ev.dedupe_key = ${dedupeKey}
       JOIN notification_channels c ON ${LISTENS}
      WHERE ${ANY_LISTENING} AND ${runs}
        AND NOT EXISTS (SELECT 1 FROM notification_deliveries x WHERE x.event_row_id = ev.id)`,
      params: [type, ...runArgs],
    },
  ]
}

/** A constant of this module's own (an alert type), quoted for SQL. */
function sqlString(value: string): string {
  if (!/^[a-z_]+$/.test(value)) throw new Error(`not an alert type: ${value}`)
  return `'${value}'`
}
