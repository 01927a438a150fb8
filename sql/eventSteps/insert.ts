/**
 * Expanding a run's program into step rows: idempotently for a claimed run,
 * and set-wise, in their final state, inside the start transaction.
 */
import type { Queryable, SqlValue } from '../db.ts'
import { chunkRows, idSet, placeholders, toJson } from '../json.ts'
import type { Raw, StepSpec } from './rows.ts'

/**
 * A spec's params as stored. Specs are cached per version (the engine expands a
 * program once), so a batch of runs of one version serialises them once.
 */
const paramsJson = new WeakMap<StepSpec, string | null>()
function specParams(s: StepSpec): string | null {
  let text = paramsJson.get(s)
  if (text === undefined) {
    text = toJson(s.params)
    paramsJson.set(s, text)
  }
  return text
}

/** The columns {@link specValues} fills, in its order. */
const SPEC_COLUMNS =
  'run_id, seq, phase_index, phase, ending, kind, params, max_attempts, backoff_ms, timeout_ms, on_error'
const SPEC_COLUMN_COUNT = 11

/** The variable part of a step row's size, for {@link chunkRows}. */
const specBytes = (s: StepSpec): number => specParams(s)?.length ?? 4

function specValues(runId: number, s: StepSpec): SqlValue[] {
  return [
    runId,
    s.seq,
    s.phaseIndex,
    s.phase,
    s.ending ? 1 : 0,
    s.kind,
    specParams(s),
    s.maxAttempts,
    s.backoffMs,
    s.timeoutMs,
    s.onError,
  ]
}

/**
 * Expand programs into step rows, idempotently: `UNIQUE (run_id, seq)` and
 * INSERT IGNORE make a second expansion (a crashed `starting` picked up again)
 * write nothing. Answers how many rows were new.
 */
export async function expand(
  db: Queryable,
  items: readonly { runId: number; specs: readonly StepSpec[] }[],
): Promise<number> {
  const rows = items.flatMap((i) => i.specs.map((s) => ({ values: specValues(i.runId, s), spec: s })))
  let inserted = 0
  // Bounded statements: a very large batch is split so one packet stays small.
  for (const rowsOfChunk of chunkRows(rows, (r) => specBytes(r.spec))) {
    const chunk = rowsOfChunk.map((r) => r.values)
    const res = await db.runQuery(
      `INSERT IGNORE INTO event_run_steps (${SPEC_COLUMNS})
       VALUES ${chunk.map(() => `(${placeholders(SPEC_COLUMN_COUNT)})`).join(', ')}`,
      chunk.flat(),
    )
    inserted += res.affectedRows
  }
  return inserted
}

/** One step row of a run being started: its spec, and whether the start transaction ran it. */
export interface StartedStep {
  runId: number
  spec: StepSpec
  /** Ran to completion inside the start transaction (one attempt). */
  done: boolean
}

/**
 * A spec at least this many runs of one start share (the same step of one
 * version) is inserted set-wise: one `INSERT … SELECT` over those runs' ids
 * carries the spec's values once, instead of a VALUES row per run. For 2,500
 * runs that took the statement from about 19 to 8 µs per row, end to end
 * (client formatting, then MariaDB parsing a VALUES list 15 values wide).
 */
const SHARED_SPEC_MIN_RUNS = 8
/** Run ids per set-wise statement, at most. */
const MAX_RUN_IDS_PER_STATEMENT = 2000

/**
 * Insert the step rows of runs being started, each in the state the start
 * transaction's attempt left it (`completed` after one attempt, or `pending`), and
 * answer their ids in input order. Plain INSERT: the run was `scheduled` and
 * locked, so it has no rows yet, and a duplicate would be a bug worth failing on.
 *
 * Rows of a spec many runs share go in set-wise (see
 * {@link SHARED_SPEC_MIN_RUNS}); the rest as multi-row VALUES. A run's step ids
 * then need not follow its `seq`, which is what orders steps everywhere.
 *
 * The ids come from each statement's first id when the server hands out
 * consecutive ids within a statement (`innodb_autoinc_lock_mode` 0 or 1, the
 * default; the set-wise statement produces its rows in run id order); under
 * mode 2 (Galera) they are read back. A single row's id is always its
 * statement's.
 */
export async function insertStarted(
  tx: Queryable,
  rows: readonly StartedStep[],
  at: Date,
  opts: {
    /** Read the ids back even where they are consecutive (tests cover both ways with it). @default false */
    readBack?: boolean
  } = {},
): Promise<number[]> {
  if (rows.length === 0) return []
  // One row's id is its statement's insertId under every lock mode: only
  // several rows need the mode and the increment between their ids. That
  // spares a lone run's start (the common case on a quiet instance) a round trip.
  const [mode] =
    rows.length === 1 && opts.readBack !== true
      ? [{ mode: 0, step: 1 }]
      : await tx.query<{ mode: number; step: number }>(
          'SELECT @@innodb_autoinc_lock_mode AS mode, @@auto_increment_increment AS step',
        )
  const consecutive = Number(mode?.mode) < 2 && opts.readBack !== true
  const step = Number(mode?.step ?? 1)
  const ids = new Array<number>(rows.length)
  // One statement's rows got consecutive ids from its first, in the order it produced them.
  const assignIds = (positions: readonly number[], first: number) => {
    for (let k = 0; k < positions.length; k++) ids[positions[k] as number] = first + k * step
  }
  const outcome = (done: boolean) => [
    done ? 'completed' : 'pending',
    done ? 1 : 0,
    done ? at : null,
    done ? at : null,
  ]

  // Row positions by (spec, outcome); a spec object is one step of one version.
  const bySpec = new Map<StepSpec, Map<boolean, number[]>>()
  for (let i = 0; i < rows.length; i++) {
    const { spec, done } = rows[i] as StartedStep
    const byOutcome = bySpec.get(spec) ?? new Map<boolean, number[]>()
    bySpec.set(spec, byOutcome)
    const positions = byOutcome.get(done)
    if (positions) positions.push(i)
    else byOutcome.set(done, [i])
  }
  const rowByRow: number[] = []
  for (const [spec, byOutcome] of bySpec) {
    for (const [done, positions] of byOutcome) {
      if (positions.length < SHARED_SPEC_MIN_RUNS) {
        rowByRow.push(...positions)
        continue
      }
      positions.sort((a, b) => (rows[a] as StartedStep).runId - (rows[b] as StartedStep).runId)
      const shared = [...specValues(0, spec).slice(1), ...outcome(done)]
      for (let from = 0; from < positions.length; from += MAX_RUN_IDS_PER_STATEMENT) {
        const chunk = positions.slice(from, from + MAX_RUN_IDS_PER_STATEMENT)
        const which = idSet(
          'r.id',
          chunk.map((i) => (rows[i] as StartedStep).runId),
        )
        const res = await tx.runQuery(
          `INSERT INTO event_run_steps (${SPEC_COLUMNS}, status, attempts, started_at, ended_at)
           SELECT r.id, ${placeholders(shared.length)} FROM event_runs r
            WHERE ${which.sql} ORDER BY r.id`,
          [...shared, ...which.args],
        )
        if (res.affectedRows !== chunk.length)
          throw new Error(`inserted ${res.affectedRows} of ${chunk.length} step rows`)
        if (consecutive) assignIds(chunk, res.insertId)
      }
    }
  }
  rowByRow.sort((a, b) => a - b)
  for (const chunk of chunkRows(rowByRow, (i) => specBytes((rows[i] as StartedStep).spec))) {
    const res = await tx.runQuery(
      `INSERT INTO event_run_steps (${SPEC_COLUMNS}, status, attempts, started_at, ended_at)
       VALUES ${chunk.map(() => `(${placeholders(SPEC_COLUMN_COUNT + 4)})`).join(', ')}`,
      chunk.flatMap((i) => {
        const r = rows[i] as StartedStep
        return [...specValues(r.runId, r.spec), ...outcome(r.done)]
      }),
    )
    if (res.affectedRows !== chunk.length)
      throw new Error(`inserted ${res.affectedRows} of ${chunk.length} step rows`)
    if (consecutive) assignIds(chunk, res.insertId)
  }

  if (!consecutive) {
    const runIds = [...new Set(rows.map((r) => r.runId))]
    const byKey = new Map<string, number>()
    for (let from = 0; from < runIds.length; from += MAX_RUN_IDS_PER_STATEMENT) {
      const some = runIds.slice(from, from + MAX_RUN_IDS_PER_STATEMENT)
      const found = await tx.query<Raw>(
        `SELECT id, run_id, seq FROM event_run_steps WHERE run_id IN (${placeholders(some.length)})`,
        some,
      )
      for (const f of found) byKey.set(`${f.run_id}:${f.seq}`, Number(f.id))
    }
    rows.forEach((r, i) => {
      const id = byKey.get(`${r.runId}:${r.spec.seq}`)
      if (id === undefined) throw new Error(`step ${r.spec.seq} of run ${r.runId} was not inserted`)
      ids[i] = id
    })
  }
  return ids
}

/**
 * Store the result of a step {@link insertStarted} wrote as `completed`: a pure
 * step that answered one, inside the same start transaction.
 */
export async function setStartedResult(tx: Queryable, id: number, result: unknown): Promise<boolean> {
  const res = await tx.run(`UPDATE event_run_steps SET result = ? WHERE id = ? AND status = 'completed'`, [
    toJson(result),
    id,
  ])
  return res.affectedRows === 1
}
