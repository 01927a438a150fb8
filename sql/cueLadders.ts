/**
 * `cue_ladders`: where each cue's ladder stands (who it is for, how many
 * reminders and escalations went out) and who answered it, how and when.
 * Every move is guarded on the value it moves from, so two writers of the
 * same rung or two answers cannot both apply.
 */
import type { Queryable, Row, SqlValue, Statement } from './db.ts'
import {
  hydrate as hydrateStep,
  type Raw,
  SELECT_STEP,
  STEP_COLUMNS,
  type StepRow,
} from './eventSteps/rows.ts'
import { chunkRows, clampLimit, parseJson, placeholders, toJson } from './json.ts'

export type CueOutcome = 'resolved' | 'skipped' | 'timedOut'
export type CueVia = 'api' | 'console' | 'link' | 'timeout'

export interface CueAnswerRow {
  outcome: CueOutcome
  by: string
  via: CueVia
  at: Date
  note: string | null
}

export interface LadderRow {
  stepId: number
  runId: number
  prompt: string
  openedAt: Date
  deadlineAt: Date | null
  assignees: string[]
  exclusive: boolean
  escalationLevel: number
  remindersSent: number
  answer: CueAnswerRow | null
}

const COLUMNS = `step_id, run_id, prompt, opened_at, deadline_at, assignees, exclusive, escalation_level,
  reminders_sent, answer_outcome, answer_by, answer_via, answer_at, answer_note`

function hydrate(r: Record<string, unknown>): LadderRow {
  return {
    stepId: Number(r.step_id),
    runId: Number(r.run_id),
    prompt: String(r.prompt),
    openedAt: r.opened_at as Date,
    deadlineAt: (r.deadline_at as Date | null) ?? null,
    assignees: parseJson<string[]>(r.assignees, []),
    exclusive: Boolean(Number(r.exclusive)),
    escalationLevel: Number(r.escalation_level),
    remindersSent: Number(r.reminders_sent),
    answer:
      r.answer_outcome === null || r.answer_outcome === undefined
        ? null
        : {
            outcome: r.answer_outcome as CueOutcome,
            by: String(r.answer_by),
            via: r.answer_via as CueVia,
            at: r.answer_at as Date,
            note: (r.answer_note as string | null) ?? null,
          },
  }
}

export async function get(db: Queryable, stepId: number): Promise<LadderRow | null> {
  const [row] = await db.execute(`SELECT ${COLUMNS} FROM cue_ladders WHERE step_id = ?`, [stepId])
  return row ? hydrate(row) : null
}

/** The row, locked until the transaction ends: an answer decides on what no one else can change meanwhile. */
export async function getForUpdate(tx: Queryable, stepId: number): Promise<LadderRow | null> {
  const [row] = await tx.execute(`SELECT ${COLUMNS} FROM cue_ladders WHERE step_id = ? FOR UPDATE`, [stepId])
  return row ? hydrate(row) : null
}

/** {@link getForUpdate} as a statement for a batch; its rows read by {@link ladderOf}. */
export function getForUpdateStatement(stepId: number): Statement {
  return { sql: `SELECT ${COLUMNS} FROM cue_ladders WHERE step_id = ? FOR UPDATE`, params: [stepId] }
}

/** The ladder in the answer of {@link getForUpdateStatement}, or null when the cue has none. */
export function ladderOf(rows: readonly Row[]): LadderRow | null {
  const [row] = rows
  return row ? hydrate(row) : null
}

export async function getMany(db: Queryable, stepIds: readonly number[]): Promise<LadderRow[]> {
  if (stepIds.length === 0) return []
  const rows = await db.query(
    `SELECT ${COLUMNS} FROM cue_ladders WHERE step_id IN (${placeholders(stepIds.length)})`,
    [...stepIds],
  )
  return rows.map(hydrate)
}

export interface NewLadder {
  stepId: number
  runId: number
  prompt: string
  openedAt: Date
  deadlineAt: Date | null
  assignees: readonly string[]
  exclusive: boolean
}

/** Open a cue's ladder; true when this call made the row (a re-entry finds it made). */
export async function open(tx: Queryable, l: NewLadder): Promise<boolean> {
  return (await openMany(tx, [l])) === 1
}

/**
 * Open many cues' ladders set-wise (one multi-row INSERT per chunk of a few
 * thousand); answers how many rows were made. A row already there (a re-entry,
 * a racing writer) is kept as it is.
 */
export async function openMany(tx: Queryable, list: readonly NewLadder[]): Promise<number> {
  let made = 0
  for (const st of openManyStatements(list)) made += (await tx.runQuery(st.sql, st.params)).affectedRows
  return made
}

/** {@link openMany} as statements for a batch, one per chunk: their affected rows are the ladders made. */
export function openManyStatements(list: readonly NewLadder[]): Statement[] {
  return chunkRows(list, (l) => 4 * Math.min(l.prompt.length, 1000) + 200).map((chunk) => {
    const params: SqlValue[] = []
    for (const l of chunk)
      params.push(
        l.stepId,
        l.runId,
        l.prompt.slice(0, 1000),
        l.openedAt,
        l.deadlineAt,
        toJson([...l.assignees]),
        l.exclusive ? 1 : 0,
      )
    return {
      sql: `INSERT IGNORE INTO cue_ladders (step_id, run_id, prompt, opened_at, deadline_at, assignees, exclusive)
       VALUES ${chunk.map(() => '(?, ?, ?, ?, ?, ?, ?)').join(', ')}`,
      params,
    }
  })
}

/** `reminders_sent: from → to`, only from the value read (a second writer moves nothing). */
export async function advanceReminders(
  tx: Queryable,
  stepId: number,
  from: number,
  to: number,
): Promise<boolean> {
  const res = await tx.run(
    'UPDATE cue_ladders SET reminders_sent = ? WHERE step_id = ? AND reminders_sent = ? AND answer_outcome IS NULL',
    [to, stepId, from],
  )
  return res.affectedRows === 1
}

/** `escalation_level: from → to` with the assignees it adds, only from the value read. */
export async function escalate(
  tx: Queryable,
  stepId: number,
  from: number,
  to: number,
  assignees: readonly string[],
): Promise<boolean> {
  const res = await tx.run(
    `UPDATE cue_ladders SET escalation_level = ?, assignees = ?
      WHERE step_id = ? AND escalation_level = ? AND answer_outcome IS NULL`,
    [to, toJson([...assignees]), stepId, from],
  )
  return res.affectedRows === 1
}

/** Write the answer once; false when the cue already has one. */
export async function recordAnswer(tx: Queryable, stepId: number, a: CueAnswerRow): Promise<boolean> {
  const st = recordAnswerStatement(stepId, a)
  const res = await tx.run(st.sql, st.params)
  return res.affectedRows === 1
}

/** {@link recordAnswer} as a statement for a batch: one row affected when it applied. */
export function recordAnswerStatement(stepId: number, a: CueAnswerRow): Statement {
  return {
    sql: `UPDATE cue_ladders SET answer_outcome = ?, answer_by = ?, answer_via = ?, answer_at = ?, answer_note = ?
      WHERE step_id = ? AND answer_outcome IS NULL`,
    params: [
      a.outcome,
      a.by.slice(0, 191),
      a.via,
      a.at,
      a.note === null ? null : a.note.slice(0, 1000),
      stepId,
    ],
  }
}

/**
 * Steps parked on a person, oldest first; with `identities` (a caller's name
 * and `team:NAME` entries), only the cues assigned to one of them and the
 * cues assigned to nobody. A range of idx_evstep_waiting_since, which holds
 * them and no other step as non-NULL (migration 0023).
 */
export async function listWaiting(
  db: Queryable,
  limit: number,
  identities: readonly string[] | null,
): Promise<StepRow[]> {
  const n = clampLimit(limit, 100)
  if (identities === null) {
    const rows = await db.execute<Raw>(
      `${SELECT_STEP} WHERE s.waiting_since IS NOT NULL ORDER BY s.waiting_since, s.id LIMIT ${n}`,
    )
    return rows.map(hydrateStep)
  }
  // One caller's inbox is the many callers' statement with one part.
  return (await listWaitingForEach(db, [{ limit: n, identities }]))[0] ?? []
}

/** Callers' inboxes read by one statement of {@link listWaitingForEach}: bounds its text and its rows (each up to 500). */
const INBOXES_PER_STATEMENT = 16

/**
 * {@link listWaiting} for many callers at once (`asks[i]`: a limit and a
 * caller's identities), answered in the order asked: one statement per 16
 * callers, each caller's part filtered before its own limit, so no caller's
 * cues wait behind others' older ones. The live inbox polls every distinct
 * caller together this way instead of a round trip each, one after another.
 */
export async function listWaitingForEach(
  db: Queryable,
  asks: readonly { limit: number; identities: readonly string[] }[],
): Promise<StepRow[][]> {
  const out: StepRow[][] = asks.map(() => [])
  for (let from = 0; from < asks.length; from += INBOXES_PER_STATEMENT) {
    const chunk = asks.slice(from, from + INBOXES_PER_STATEMENT)
    const parts = chunk.map(
      (a, i) => `(SELECT ${STEP_COLUMNS}, s.waiting_since AS waiting_since, ${from + i} AS ask
        FROM event_run_steps s LEFT JOIN cue_ladders l ON l.step_id = s.id
        WHERE s.waiting_since IS NOT NULL
          AND (l.step_id IS NULL OR JSON_LENGTH(l.assignees) = 0 OR JSON_OVERLAPS(l.assignees, ?))
        ORDER BY s.waiting_since, s.id LIMIT ${clampLimit(a.limit, 100)})`,
    )
    // A union's order is its outer ORDER BY's alone: each caller's part comes back oldest first.
    // Each part is a range of idx_evstep_waiting_since (migration 0023), like listWaiting's.
    const rows = await db.query<Raw>(
      `${parts.join(' UNION ALL ')} ORDER BY ask, waiting_since, id`,
      chunk.map((a) => toJson([...a.identities])),
    )
    for (const r of rows) out[Number(r.ask)]?.push(hydrateStep(r))
  }
  return out
}
