/** `notification_channels`: where notifications go and which ones. */
import type { Queryable } from '../db.ts'
import { parseJson, placeholders, toJson } from '../json.ts'

export type ChannelKind = 'WEBHOOK' | 'SLACK' | 'EMAIL'

export interface ChannelFields {
  name: string
  kind: ChannelKind
  target: string
  events: string[]
  /** null = every definition. */
  definitionIds: number[] | null
  /** null = cue events whoever they are assigned to. */
  teams: string[] | null
  lateStartSeconds: number
  /** A `{{secret.NAME}}` reference, or null. */
  signingSecret: string | null
  enabled: boolean
}

export interface ChannelRow extends ChannelFields {
  id: number
  createdAt: Date
}

const COLUMNS = `id, name, kind, target, events, definition_ids, teams, late_start_seconds, signing_secret, enabled, created_at`

function hydrate(r: Record<string, unknown>): ChannelRow {
  return {
    id: Number(r.id),
    name: String(r.name),
    kind: r.kind as ChannelKind,
    target: String(r.target),
    events: parseJson<string[]>(r.events, []),
    definitionIds: parseJson<number[] | null>(r.definition_ids, null),
    teams: parseJson<string[] | null>(r.teams, null),
    lateStartSeconds: Number(r.late_start_seconds),
    signingSecret: (r.signing_secret as string | null) ?? null,
    enabled: Boolean(Number(r.enabled)),
    createdAt: r.created_at as Date,
  }
}

function values(c: ChannelFields) {
  return [
    c.name,
    c.kind,
    c.target,
    toJson(c.events),
    c.definitionIds && c.definitionIds.length > 0 ? toJson(c.definitionIds) : null,
    c.teams && c.teams.length > 0 ? toJson(c.teams) : null,
    c.lateStartSeconds,
    c.signingSecret,
    c.enabled ? 1 : 0,
  ]
}

export async function list(db: Queryable): Promise<ChannelRow[]> {
  return (await db.execute(`SELECT ${COLUMNS} FROM notification_channels ORDER BY name`)).map(hydrate)
}

export async function getById(db: Queryable, id: number): Promise<ChannelRow | null> {
  const [row] = await db.execute(`SELECT ${COLUMNS} FROM notification_channels WHERE id = ?`, [id])
  return row ? hydrate(row) : null
}

export async function getByIds(db: Queryable, ids: readonly number[]): Promise<ChannelRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query(
    `SELECT ${COLUMNS} FROM notification_channels WHERE id IN (${placeholders(ids.length)})`,
    [...ids],
  )
  return rows.map(hydrate)
}

/** Answers the new id; a duplicate name throws the driver's duplicate-key error. */
export async function create(db: Queryable, c: ChannelFields): Promise<number> {
  const res = await db.run(
    `INSERT INTO notification_channels (name, kind, target, events, definition_ids, teams, late_start_seconds,
            signing_secret, enabled) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    values(c),
  )
  return res.insertId
}

export async function update(db: Queryable, id: number, c: ChannelFields): Promise<boolean> {
  const res = await db.run(
    `UPDATE notification_channels SET name = ?, kind = ?, target = ?, events = ?, definition_ids = ?, teams = ?,
            late_start_seconds = ?, signing_secret = ? , enabled = ? WHERE id = ?`,
    [...values(c), id],
  )
  return res.affectedRows === 1
}

/** Deletes the channel and (by cascade) its delivery log. */
export async function remove(db: Queryable, id: number): Promise<boolean> {
  const res = await db.run('DELETE FROM notification_channels WHERE id = ?', [id])
  return res.affectedRows === 1
}

/** Enabled channels listening for `event` (the late-start sweep's thresholds). */
export async function listeningTo(db: Queryable, event: string): Promise<ChannelRow[]> {
  const rows = await db.execute(
    `SELECT ${COLUMNS} FROM notification_channels WHERE enabled = 1 AND JSON_CONTAINS(events, JSON_QUOTE(?))`,
    [event],
  )
  return rows.map(hydrate)
}
