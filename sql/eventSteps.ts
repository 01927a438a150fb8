/**
 * `event_run_steps`: a run's program expanded into rows, and the moves a step
 * makes. Every move is guarded on the step's current state and answers whether
 * it happened, so a person's `skipStep` racing the runner's `complete` has one
 * winner and the loser learns it.
 *
 * A step is *executing* (`running` with a lease), *parked* on a person
 * (`running`, `parked = 1`: a cue; the only kind counted as waiting), *sleeping*
 * (`running`/`pending` with a future `wake_at`: a timer or a retry backoff), or
 * done (`completed | failed | skipped | cancelled`).
 */
import type { Queryable, SqlValue } from './db.ts'
import { chunkRows, clampLimit, parseJson, placeholders, toJson } from './json.ts'
import { LEASE_EXPIRY, leaseFree, leaseMicros } from './leases.ts'
import type { StepOnError, StepStatus } from './states.ts'
import { KEY_HOLDING } from './states.ts'

/** One step of an expanded program: what a run's step row is made from. */
export interface StepSpec {
  /** Position in the whole program, 0-based. */
  seq: number
  phaseIndex: number
  phase: string
  ending: boolean
  kind: string
  params: Record<string, unknown>
  maxAttempts: number
  backoffMs: number
  timeoutMs: number
  onError: StepOnError
}

export interface StepRow {
  id: number
  runId: number
  seq: number
  phaseIndex: number
  phase: string
  ending: boolean
  kind: string
  params: Record<string, unknown> | null
  maxAttempts: number
  backoffMs: number
  timeoutMs: number
  onError: StepOnError
  status: StepStatus
  parked: boolean
  attempts: number
  wakeAt: Date | null
  claimedBy: string | null
  claimExpiresAt: Date | null
  startedAt: Date | null
  endedAt: Date | null
  lastError: string | null
  result: unknown
  updatedAt: Date
}

type Raw = Record<string, unknown>

const STEP_COLUMNS = `s.id, s.run_id, s.seq, s.phase_index, s.phase, s.ending, s.kind, s.params, s.max_attempts,
  s.backoff_ms, s.timeout_ms, s.on_error, s.status, s.parked, s.attempts, s.wake_at, s.claimed_by,
  s.claim_expires_at, s.started_at, s.ended_at, s.last_error, s.result, s.updated_at`

const SELECT_STEP = `SELECT ${STEP_COLUMNS} FROM event_run_steps s`

function hydrate(row: Raw): StepRow {
  return {
    id: Number(row.id),
    runId: Number(row.run_id),
    seq: Number(row.seq),
    phaseIndex: Number(row.phase_index),
    phase: String(row.phase),
    ending: Boolean(Number(row.ending)),
    kind: String(row.kind),
    params: parseJson<Record<string, unknown> | null>(row.params, null),
    maxAttempts: Number(row.max_attempts),
    backoffMs: Number(row.backoff_ms),
    timeoutMs: Number(row.timeout_ms),
    onError: row.on_error as StepOnError,
    status: row.status as StepStatus,
    parked: Boolean(Number(row.parked)),
    attempts: Number(row.attempts),
    wakeAt: (row.wake_at as Date | null) ?? null,
    claimedBy: (row.claimed_by as string | null) ?? null,
    claimExpiresAt: (row.claim_expires_at as Date | null) ?? null,
    startedAt: (row.started_at as Date | null) ?? null,
    endedAt: (row.ended_at as Date | null) ?? null,
    lastError: (row.last_error as string | null) ?? null,
    result: parseJson<unknown>(row.result, null),
    updatedAt: row.updated_at as Date,
  }
}

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
 * Insert the step rows of runs being started, each already in the state the
 * start transaction leaves it (`completed` after one attempt, or `pending`), and
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
 * mode 2 (Galera) they are read back.
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
  const [mode] = await tx.query<{ mode: number; step: number }>(
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
        const res = await tx.runQuery(
          `INSERT INTO event_run_steps (${SPEC_COLUMNS}, status, attempts, started_at, ended_at)
           SELECT r.id, ${placeholders(shared.length)} FROM event_runs r
            WHERE r.id IN (${placeholders(chunk.length)}) ORDER BY r.id`,
          [...shared, ...chunk.map((i) => (rows[i] as StartedStep).runId)],
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
 * Undo {@link insertStarted}'s `completed` for steps whose attempt inside the start
 * transaction failed after all: back to `pending` with no attempt counted, for
 * the engine to run with its retries.
 */
export async function reopenStarted(tx: Queryable, ids: readonly number[]): Promise<number> {
  if (ids.length === 0) return 0
  const res = await tx.runQuery(
    `UPDATE event_run_steps SET status = 'pending', attempts = 0, started_at = NULL, ended_at = NULL
      WHERE id IN (${placeholders(ids.length)}) AND status = 'completed'`,
    [...ids],
  )
  return res.affectedRows
}

export async function getById(db: Queryable, id: number): Promise<StepRow | null> {
  const [row] = await db.execute<Raw>(`${SELECT_STEP} WHERE s.id = ?`, [id])
  return row ? hydrate(row) : null
}

export async function getByIds(db: Queryable, ids: readonly number[]): Promise<StepRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_STEP} WHERE s.id IN (${placeholders(ids.length)})`, [...ids])
  return rows.map(hydrate)
}

/** Every step of a run, in program order. */
export async function listForRun(db: Queryable, runId: number): Promise<StepRow[]> {
  const rows = await db.execute<Raw>(`${SELECT_STEP} WHERE s.run_id = ? ORDER BY s.seq`, [runId])
  return rows.map(hydrate)
}

/** Every step of several runs in one statement, in program order per run. */
export async function listForRuns(db: Queryable, runIds: readonly number[]): Promise<StepRow[]> {
  if (runIds.length === 0) return []
  const rows = await db.query<Raw>(
    `${SELECT_STEP} WHERE s.run_id IN (${placeholders(runIds.length)}) ORDER BY s.run_id, s.seq`,
    [...runIds],
  )
  return rows.map(hydrate)
}

/** The first step of a run that is not done (pending or running), or null when all are. */
export async function nextStep(db: Queryable, runId: number): Promise<StepRow | null> {
  const [row] = await db.execute<Raw>(
    `${SELECT_STEP} WHERE s.run_id = ? AND s.status IN ('pending','running') ORDER BY s.seq LIMIT 1`,
    [runId],
  )
  return row ? hydrate(row) : null
}

/** {@link nextStep} for many runs in one statement. */
export async function nextSteps(db: Queryable, runIds: readonly number[]): Promise<Map<number, StepRow>> {
  const out = new Map<number, StepRow>()
  if (runIds.length === 0) return out
  const rows = await db.query<Raw>(
    `${SELECT_STEP}
       JOIN (SELECT run_id, MIN(seq) AS seq FROM event_run_steps
              WHERE run_id IN (${placeholders(runIds.length)}) AND status IN ('pending','running')
              GROUP BY run_id) n ON n.run_id = s.run_id AND n.seq = s.seq`,
    [...runIds],
  )
  for (const r of rows) {
    const step = hydrate(r)
    out.set(step.runId, step)
  }
  return out
}

/**
 * Begin an attempt: the step becomes `running` with this owner's lease and one
 * more attempt. Allowed from `pending` (first attempt, or a retry whose backoff
 * ended) and from an executing step whose owner's lease is gone (a crash: the
 * step runs again, at least once). Refused for parked or sleeping steps (see
 * {@link resume}), done steps, and a step under another owner's live lease.
 */
export async function begin(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'running', attempts = attempts + 1, claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY},
            started_at = COALESCE(started_at, ?), wake_at = NULL, parked = 0
      WHERE id = ?
        AND ((status = 'pending' AND (wake_at IS NULL OR wake_at <= ?))
             OR (status = 'running' AND parked = 0 AND wake_at IS NULL))
        AND ${leaseFree()}`,
    // started_at is the caller's `now`, not NOW(3): `core.wait {seconds}` and cue
    // timeouts count from it and compare with the runner's clock, so both ends
    // must come from the same clock. The lease is on the database's (sql/leases.ts).
    [owner, leaseMicros(leaseUntil, now), now, id, now],
  )
  return res.affectedRows === 1
}

/**
 * Undo a {@link begin} whose answer was lost: put the step back exactly as it
 * was read before (`before`), but only if the row is still just what that
 * begin wrote (running, one more attempt, still this owner's: a reclaim or
 * another begin would have changed one of them), so nothing that happened
 * since is undone. Answers whether it was put back;
 * false also when the begin never committed.
 */
export async function takeBackBegin(db: Queryable, before: StepRow, owner: string): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = ?, attempts = ?, claimed_by = ?, claim_expires_at = ?, started_at = ?, wake_at = ?, parked = ?
      WHERE id = ? AND status = 'running' AND attempts = ? AND claimed_by = ?`,
    [
      before.status,
      before.attempts,
      before.claimedBy,
      before.claimExpiresAt,
      before.startedAt,
      before.wakeAt,
      before.parked ? 1 : 0,
      before.id,
      before.attempts + 1,
      owner,
    ],
  )
  return res.affectedRows === 1
}

/**
 * {@link begin} for many pending first attempts at once (inline kinds in a
 * batch); answers how many began. `now` stamps `started_at`, from the runner's
 * clock like {@link begin}.
 */
export async function beginMany(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_run_steps
        SET status = 'running', attempts = attempts + 1, claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY},
            started_at = COALESCE(started_at, ?), wake_at = NULL, parked = 0
      WHERE id IN (${placeholders(ids.length)}) AND status = 'pending' AND wake_at IS NULL AND claim_expires_at IS NULL`,
    [owner, leaseMicros(leaseUntil, now), now, ...ids],
  )
  return res.affectedRows
}

/**
 * Re-enter a sleeping step (its timer came due) or a parked one (its timeout
 * passed) without spending an attempt: a timer coming due is not a retry.
 * `wake_at` is kept until the step completes, so a crash here re-enters again.
 */
export async function resume(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET claimed_by = ?, claim_expires_at = ${LEASE_EXPIRY}, parked = 0
      WHERE id = ? AND status = 'running' AND wake_at IS NOT NULL AND wake_at <= ?
        AND ${leaseFree()}`,
    [owner, leaseMicros(leaseUntil, now), id, now],
  )
  return res.affectedRows === 1
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

/** `running → completed` with its result; guarded, so a skip that won is kept. */
export async function complete(db: Queryable, id: number, result: unknown): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'completed', result = ?, ended_at = NOW(3), claimed_by = NULL, claim_expires_at = NULL,
            parked = 0, wake_at = NULL, last_error = NULL
      WHERE id = ? AND status = 'running'`,
    [toJson(result), id],
  )
  return res.affectedRows === 1
}

/** Complete many executing steps at once (instant kinds in a batch). */
export async function completeMany(db: Queryable, ids: readonly number[]): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_run_steps
        SET status = 'completed', ended_at = NOW(3), claimed_by = NULL, claim_expires_at = NULL,
            parked = 0, wake_at = NULL
      WHERE id IN (${placeholders(ids.length)}) AND status = 'running'`,
    [...ids],
  )
  return res.affectedRows
}

/** Park on a person: `running`, `parked = 1`, no lease; `until` is the cue's timeout. */
export async function park(db: Queryable, id: number, until: Date | null): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET parked = 1, wake_at = ?, claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status = 'running'`,
    [until, id],
  )
  return res.affectedRows === 1
}

/** A durable timer: `running`, not parked, no lease, due at `until`. */
export async function sleep(db: Queryable, id: number, until: Date): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET parked = 0, wake_at = ?, claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status = 'running'`,
    [until, id],
  )
  return res.affectedRows === 1
}

/**
 * A failed attempt with attempts left: back to `pending` until `wakeAt`, keeping
 * the error. `pending` with attempts > 0 and a wake_at is "in backoff".
 */
export async function scheduleRetry(
  db: Queryable,
  id: number,
  error: string,
  wakeAt: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET status = 'pending', last_error = ?, wake_at = ?, claimed_by = NULL,
            claim_expires_at = NULL, parked = 0
      WHERE id = ? AND status = 'running'`,
    [error.slice(0, 1000), wakeAt, id],
  )
  return res.affectedRows === 1
}

/**
 * `running → pending` for an attempt its runner cut short while shutting down:
 * the attempt is taken back (not counted against the step's retries) and the
 * step is due again at `wakeAt`.
 */
export async function interrupt(db: Queryable, id: number, reason: string, wakeAt: Date): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps SET status = 'pending', attempts = GREATEST(attempts, 1) - 1, last_error = ?,
            wake_at = ?, claimed_by = NULL, claim_expires_at = NULL, parked = 0
      WHERE id = ? AND status = 'running'`,
    [reason.slice(0, 1000), wakeAt, id],
  )
  return res.affectedRows === 1
}

/** `running → failed`: the attempts are spent or the failure is not retryable. */
export async function fail(db: Queryable, id: number, error: string): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'failed', last_error = ?, ended_at = NOW(3), claimed_by = NULL, claim_expires_at = NULL,
            parked = 0, wake_at = NULL
      WHERE id = ? AND status = 'running'`,
    [error.slice(0, 1000), id],
  )
  return res.affectedRows === 1
}

/** A person resolves a parked cue: `running, parked → completed`. */
export async function resolveParked(db: Queryable, id: number, result: unknown): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'completed', result = ?, ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status = 'running' AND parked = 1`,
    [toJson(result), id],
  )
  return res.affectedRows === 1
}

/** A person skips a step that has not finished (pending, sleeping, parked or executing). */
export async function skip(db: Queryable, id: number, reason: string | null): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'skipped', result = ?, ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE id = ? AND status IN ('pending','running')`,
    [toJson(reason === null ? null : { reason }), id],
  )
  return res.affectedRows === 1
}

/** Cancel every unfinished step of a run (the run was cancelled or failed). */
export async function cancelUnfinished(db: Queryable, runId: number): Promise<number> {
  const res = await db.run(
    `UPDATE event_run_steps
        SET status = 'cancelled', ended_at = NOW(3), parked = 0, wake_at = NULL,
            claimed_by = NULL, claim_expires_at = NULL
      WHERE run_id = ? AND status IN ('pending','running')`,
    [runId],
  )
  return res.affectedRows
}

/**
 * Release step leases whose owner did not come back. Like the run reclaim it
 * changes no status and no attempt counter: the step is executed again by the
 * next owner (at-least-once), under the same idempotency key.
 */
export async function reclaimStale(db: Queryable): Promise<number> {
  // Find them from the runs that can hold a step lease (the status index's live
  // ranges) and their steps, not from the steps table: every finished run's
  // steps are in it, and no index of steps serves a lease range. A step of a
  // terminal run holds no lease (ending a run ends its steps). A plain read
  // first: an UPDATE joining the runs would lock every in-flight run's row and
  // index gap, on every tick of every instance, against their claims.
  const stale = await db.execute<Raw>(
    `SELECT s.id FROM event_runs r STRAIGHT_JOIN event_run_steps s ON s.run_id = r.id
      WHERE r.status IN (${placeholders(KEY_HOLDING.length)})
        AND s.status = 'running' AND s.claim_expires_at IS NOT NULL AND s.claim_expires_at < NOW(3)`,
    [...KEY_HOLDING],
  )
  if (stale.length === 0) return 0
  const ids = stale.map((r) => Number(r.id))
  const res = await db.runQuery(
    `UPDATE event_run_steps SET claimed_by = NULL, claim_expires_at = NULL
      WHERE id IN (${placeholders(ids.length)}) AND status = 'running' AND claim_expires_at < NOW(3)`,
    [...ids],
  )
  return res.affectedRows
}

/** Steps parked on a person, oldest first (the one waiting longest is most urgent). */
export async function listWaiting(db: Queryable, limit = 100): Promise<StepRow[]> {
  const n = clampLimit(limit, 100)
  const rows = await db.execute<Raw>(
    `${SELECT_STEP} WHERE s.parked = 1 AND s.status = 'running' ORDER BY s.started_at, s.id LIMIT ${n}`,
  )
  return rows.map(hydrate)
}

/** How many steps are parked on a person, and since when the oldest has waited. */
export async function waitingSummary(db: Queryable): Promise<{ count: number; oldestAt: Date | null }> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n, MIN(started_at) AS oldest FROM event_run_steps WHERE parked = 1 AND status = 'running'`,
  )
  return { count: Number(row?.n ?? 0), oldestAt: (row?.oldest as Date | null) ?? null }
}
