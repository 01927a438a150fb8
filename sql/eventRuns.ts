/**
 * `event_runs`: materialisation, the admin list, and the runner's claims and
 * guarded transitions.
 *
 * Two protections work together and neither replaces the other. The UNIQUE key
 * (definition_id, scope, scheduled_for) makes "one run per occurrence per scope"
 * true; the compare-and-set UPDATEs below decide only WHO advances a run that
 * exists. A claim is an UPDATE whose `affectedRows = 1` is ownership: there is no
 * transaction to hold open while the work happens.
 *
 * Where the seed was weak this module does better:
 * - the due query reads `wake_at`, which is NULL or in the future for every run
 *   that is parked on a cue, waiting out a timer or leased, so idle runs leave the
 *   index and cannot starve new ones;
 * - taking a concurrency key inserts a `concurrency_locks` row in the same short
 *   transaction as the claim, so two instances can never both start a holder.
 */
import type { RunHealth, RunStatus } from '../src/states.ts'
import { IN_FLIGHT, isTerminal, KEY_HOLDING, NON_TERMINAL, RUN_STATUSES, TERMINAL } from '../src/states.ts'
import { DB_ERRNO, type Db, isDbErrno, type Queryable, type SqlValue } from './db.ts'
import { clampLimit, parseJson, placeholders, toJson } from './json.ts'

export { TERMINAL }

/** A run as stored, with typed fields. */
export interface RunRow {
  id: number
  definitionId: number
  versionId: number
  scope: string
  scheduledFor: Date
  timezone: string
  concurrencyKey: string | null
  params: Record<string, unknown> | null
  rehearsal: boolean
  startedBy: string | null
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  lastError: string | null
  claimedBy: string | null
  claimExpiresAt: Date | null
  claimToken: string | null
  wakeAt: Date | null
  startedAt: Date | null
  endedAt: Date | null
  createdAt: Date
  updatedAt: Date
}

/** A run as the admin list shows it. */
export interface RunListRow extends RunRow {
  definitionTitle: string
  definitionSlug: string
  versionNumber: number
  /** Steps parked on a person (cues), never timers. */
  waitingSteps: number
}

const RUN_COLUMNS = `r.id, r.definition_id, r.version_id, r.scope, r.scheduled_for, r.timezone, r.concurrency_key,
  r.params, r.rehearsal, r.started_by, r.status, r.health, r.current_phase, r.last_error, r.claimed_by,
  r.claim_expires_at, r.claim_token, r.wake_at, r.started_at, r.ended_at, r.created_at, r.updated_at`

// `waitingSteps` counts PARKED steps only: a cue waiting on a person. It is
// derived from the steps rather than stored on the run, because a column would
// be a second writer's opinion of them; a cue nobody notices is a run that never
// advances while looking healthy. The seed computed it as a correlated subquery
// in the list SELECT. On MariaDB 10.11 that shape (a prepared statement sorting
// through a temporary table with a dependent subquery) crashed the server once
// under concurrent load (signal 11 in free_tmp_table), so the page is read first
// and the counts for its (at most 500) runs come from one grouped query.
const WAITING_SUBQUERY = `(SELECT COUNT(*) FROM event_run_steps s
    WHERE s.run_id = r.id AND s.status = 'running' AND s.parked = 1)`

const LIST_COLUMNS = `${RUN_COLUMNS}, d.title AS definition_title, d.slug AS definition_slug,
  v.version AS version_number`

const SELECT_LIST = `
  SELECT ${LIST_COLUMNS}
    FROM event_runs r
    JOIN event_definitions d ON d.id = r.definition_id
    JOIN event_versions    v ON v.id = r.version_id`

/**
 * Attach parked-step counts to a page of list rows: one grouped query for the
 * whole page. Each run object is built once, count included: a page is up to
 * 500 rows per request, and spreading a copy of every row (then a copy of that)
 * was a measurable share of the API's allocation and GC under load.
 */
async function withWaiting(db: Queryable, rows: Raw[]): Promise<RunListRow[]> {
  if (rows.length === 0) return []
  const ids = rows.map((r) => Number(r.id))
  const counts = await db.query<Raw>(
    `SELECT run_id, COUNT(*) AS n FROM event_run_steps
      WHERE run_id IN (${placeholders(ids.length)}) AND status = 'running' AND parked = 1
      GROUP BY run_id`,
    ids,
  )
  const byRun = new Map<number, number>()
  for (const c of counts) byRun.set(Number(c.run_id), Number(c.n))
  const out = new Array<RunListRow>(rows.length)
  for (let i = 0; i < rows.length; i++) {
    out[i] = hydrateList(rows[i] as Raw, byRun.get(ids[i] as number) ?? 0)
  }
  return out
}

const SELECT_RUN = `SELECT ${RUN_COLUMNS} FROM event_runs r`

type Raw = Record<string, unknown>

function hydrate(row: Raw): RunRow {
  return {
    id: Number(row.id),
    definitionId: Number(row.definition_id),
    versionId: Number(row.version_id),
    scope: String(row.scope ?? ''),
    scheduledFor: row.scheduled_for as Date,
    timezone: String(row.timezone),
    concurrencyKey: (row.concurrency_key as string | null) ?? null,
    params: parseJson<Record<string, unknown> | null>(row.params, null),
    rehearsal: Boolean(Number(row.rehearsal)),
    startedBy: (row.started_by as string | null) ?? null,
    status: row.status as RunStatus,
    health: row.health as RunHealth,
    currentPhase: (row.current_phase as string | null) ?? null,
    lastError: (row.last_error as string | null) ?? null,
    claimedBy: (row.claimed_by as string | null) ?? null,
    claimExpiresAt: (row.claim_expires_at as Date | null) ?? null,
    claimToken: (row.claim_token as string | null) ?? null,
    wakeAt: (row.wake_at as Date | null) ?? null,
    startedAt: (row.started_at as Date | null) ?? null,
    endedAt: (row.ended_at as Date | null) ?? null,
    createdAt: row.created_at as Date,
    updatedAt: row.updated_at as Date,
  }
}

// The run object is extended in place rather than spread into a new one: one
// allocation per row matters on a 500-row page (bench/apiLatency.ts).
function hydrateList(row: Raw, waitingSteps: number): RunListRow {
  const run = hydrate(row) as RunListRow
  run.definitionTitle = String(row.definition_title)
  run.definitionSlug = String(row.definition_slug)
  run.versionNumber = Number(row.version_number)
  run.waitingSteps = waitingSteps
  return run
}

/** Filters for {@link list}. */
export interface ListRunsOptions {
  definitionId?: number | null
  status?: RunStatus | null
  /** Clamped to 1..500. @default 100 */
  limit?: number
}

/**
 * The admin run list: newest occurrence first (`scheduled_for DESC, id DESC`).
 * `limit` reaches SQL only as a clamped integer; MariaDB takes no placeholder in
 * LIMIT on a prepared statement.
 */
export async function list(db: Queryable, opts: ListRunsOptions = {}): Promise<RunListRow[]> {
  const where: string[] = []
  const args: SqlValue[] = []
  if (opts.definitionId != null) {
    where.push('r.definition_id = ?')
    args.push(opts.definitionId)
  }
  if (opts.status != null) {
    where.push('r.status = ?')
    args.push(opts.status)
  }
  const clause = where.length ? `WHERE ${where.join(' AND ')}` : ''
  const n = clampLimit(opts.limit ?? 100, 100)
  // The page is chosen from event_runs alone, walking an index in list order,
  // then joined. Sorting the joined rows instead made MariaDB drive the join
  // from the definitions, read every run into a temporary table (on disk: the
  // rows carry JSON) and sort it, for every page; under concurrent load that
  // path failed a list with "Error on delete of '/tmp/#sql-temptable…'" (the
  // fuzz drill), and it costs a scan of all runs however small the page.
  // findMissed uses the same shape for the same reason.
  const rows = await db.execute<Raw>(
    `SELECT ${LIST_COLUMNS}
       FROM (SELECT r.id FROM event_runs r ${clause} ORDER BY r.scheduled_for DESC, r.id DESC LIMIT ${n}) page
       JOIN event_runs r ON r.id = page.id
       JOIN event_definitions d ON d.id = r.definition_id
       JOIN event_versions    v ON v.id = r.version_id`,
    args,
  )
  // The join does not keep the page's order; at most 500 rows are put back in it here.
  return withWaiting(db, sortRows(rows, 'newest first'))
}

/** Put a page's rows back in `scheduled_for, id` order (a join over a derived page does not keep it). */
function sortRows(rows: Raw[], order: 'newest first' | 'oldest first'): Raw[] {
  const sign = order === 'newest first' ? -1 : 1
  return rows.sort(
    (a, b) =>
      sign * ((a.scheduled_for as Date).getTime() - (b.scheduled_for as Date).getTime()) ||
      sign * (Number(a.id) - Number(b.id)),
  )
}

export async function getById(db: Queryable, id: number): Promise<RunListRow | null> {
  const rows = await db.execute<Raw>(`${SELECT_LIST} WHERE r.id = ?`, [id])
  const [run] = await withWaiting(db, rows)
  return run ?? null
}

/** Several runs by id in one statement (for batching loaders); order not guaranteed. */
export async function getByIds(db: Queryable, ids: readonly number[]): Promise<RunListRow[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(`${SELECT_LIST} WHERE r.id IN (${placeholders(ids.length)})`, [...ids])
  return withWaiting(db, rows)
}

/** Runs claimed with one batch token (the second half of "claim many, read what you own"). */
export async function findByClaimToken(db: Queryable, token: string): Promise<RunRow[]> {
  const rows = await db.execute<Raw>(`${SELECT_RUN} WHERE r.claim_token = ? ORDER BY r.id`, [token])
  return rows.map(hydrate)
}

/** What {@link materialise} needs to insert one occurrence. */
export interface NewRun {
  definitionId: number
  versionId: number
  scope: string
  scheduledFor: Date
  timezone: string
  concurrencyKey: string | null
  params?: Record<string, unknown> | null
  rehearsal?: boolean
  startedBy?: string | null
}

function newRunValues(run: NewRun): SqlValue[] {
  return [
    run.definitionId,
    run.versionId,
    run.scope ?? '',
    run.scheduledFor,
    run.timezone || 'UTC',
    run.rehearsal ? null : run.concurrencyKey,
    toJson(run.params),
    run.rehearsal ? 1 : 0,
    run.startedBy ?? null,
    run.scheduledFor,
  ]
}

const INSERT_RUN_COLUMNS = `(definition_id, version_id, scope, scheduled_for, timezone, concurrency_key,
   params, rehearsal, started_by, wake_at)`

/**
 * Materialise one occurrence: the new run's id, or `null` when the occurrence
 * already existed. "Already existed" is the ordinary answer under a tick that
 * overran into the next one, not an error. A rehearsal never carries a key.
 */
export async function materialise(db: Queryable, run: NewRun): Promise<number | null> {
  const res = await db.run(
    `INSERT IGNORE INTO event_runs ${INSERT_RUN_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    newRunValues(run),
  )
  return res.affectedRows === 1 ? res.insertId : null
}

/** Materialise many occurrences in one statement; answers how many were new. */
export async function materialiseMany(db: Queryable, runs: readonly NewRun[]): Promise<number> {
  if (runs.length === 0) return 0
  const rowSql = `(${placeholders(10)})`
  const res = await db.runQuery(
    `INSERT IGNORE INTO event_runs ${INSERT_RUN_COLUMNS} VALUES ${runs.map(() => rowSql).join(', ')}`,
    runs.flatMap(newRunValues),
  )
  return res.affectedRows
}

/** The occurrence the unique key names, whether or not this caller created it. */
export async function findOccurrence(
  db: Queryable,
  definitionId: number,
  scope: string,
  scheduledFor: Date,
  rehearsal = false,
): Promise<RunListRow | null> {
  const rows = await db.execute<Raw>(
    `${SELECT_LIST} WHERE r.definition_id = ? AND r.scope = ? AND r.scheduled_for = ? AND r.rehearsal = ?`,
    [definitionId, scope ?? '', scheduledFor, rehearsal ? 1 : 0],
  )
  const [run] = await withWaiting(db, rows)
  return run ?? null
}

/** How many runs of a definition are not terminal: the archive pre-check. */
export async function countActiveForDefinition(db: Queryable, definitionId: number): Promise<number> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n FROM event_runs
      WHERE definition_id = ? AND status IN (${placeholders(NON_TERMINAL.length)})`,
    [definitionId, ...NON_TERMINAL],
  )
  return Number(row?.n ?? 0)
}

// ── The runner's half: due, claims, transitions, reclaim ──────────────────

const DUE_STATUSES = ['scheduled', ...IN_FLIGHT] as const

/**
 * Runs that need the runner now: `wake_at` has passed and the run is not paused
 * or terminal. It selects rather than claims, so two sweepers may see the same
 * candidates and then disagree, harmlessly, about who owns each.
 *
 * Unlike the seed's "50 oldest in flight", idle runs are not candidates at all:
 * a run parked on a cue has `wake_at` NULL (or its timeout), a run waiting out a
 * timer has it in the future, and a leased run has it at its lease expiry. So
 * 10,000 parked runs cost this query nothing.
 */
export async function findDue(db: Queryable, now: Date, limit = 50): Promise<RunRow[]> {
  const n = clampLimit(limit, 50)
  const rows = await db.execute<Raw>(
    `${SELECT_RUN}
      WHERE r.wake_at <= ? AND r.status IN (${placeholders(DUE_STATUSES.length)})
      ORDER BY r.wake_at, r.id
      LIMIT ${n}`,
    [now, ...DUE_STATUSES],
  )
  return rows.map(hydrate)
}

/**
 * Scheduled runs whose start instant passed more than their own definition's
 * grace window ago. Only `scheduled` qualifies: a run that reached `starting` has
 * begun, and "began then stalled" is a different fact from "never began".
 */
export async function findMissed(db: Queryable, now: Date, limit = 100): Promise<RunRow[]> {
  const n = clampLimit(limit, 100)
  // Ids first, then rows: the join sorts through a temporary table, which must
  // not carry the runs' JSON columns (that puts it on disk, every tick; see list).
  const rows = await db.execute<Raw>(
    `${SELECT_RUN}
       JOIN (SELECT r.id FROM event_runs r
               JOIN event_definitions d ON d.id = r.definition_id
              WHERE r.status = 'scheduled'
                AND r.scheduled_for + INTERVAL d.grace_seconds SECOND < ?
              ORDER BY r.scheduled_for, r.id
              LIMIT ${n}) page ON page.id = r.id`,
    [now],
  )
  return sortRows(rows, 'oldest first').map(hydrate)
}

// A start claim also requires the run to be inside its grace window, so a run
// that should be `missed` can never be started by a sweeper that got there first.
const WITHIN_GRACE = `scheduled_for + INTERVAL (SELECT d.grace_seconds FROM event_definitions d
     WHERE d.id = event_runs.definition_id) SECOND >= ?`

/** The answer of {@link claimStart}. */
export interface ClaimStartResult {
  /** True when this caller now owns the run in `starting`. */
  claimed: boolean
  /** When the run's key is held by another run: that run's id. */
  blockedBy: number | null
}

/**
 * Take ownership of a run that has not started: the compare-and-set
 * `scheduled → starting`, stamped with the lease.
 *
 * A run with a concurrency key takes it in the same short transaction: a lock
 * row per key is inserted (or taken over from a holder that is no longer
 * key-holding), then the run is claimed; both commit or neither does. The seed
 * read the holder and then claimed, which let two instances both see "free".
 * A blocked run stays `scheduled` (its grace window decides) and the answer
 * names the holder.
 */
export async function claimStart(
  db: Db,
  run: { id: number; concurrencyKey: string | null },
  owner: string,
  leaseUntil: Date,
  now: Date = new Date(),
): Promise<ClaimStartResult> {
  const claimSql = `UPDATE event_runs
        SET status = 'starting', claimed_by = ?, claim_expires_at = ?, claim_token = NULL, wake_at = ?,
            started_at = COALESCE(started_at, NOW(3)), start_reserve = NULL
      WHERE id = ? AND status = 'scheduled' AND ${WITHIN_GRACE}`
  if (!run.concurrencyKey) {
    const res = await db.run(`${claimSql} AND concurrency_key IS NULL`, [
      owner,
      leaseUntil,
      leaseUntil,
      run.id,
      now,
    ])
    return { claimed: res.affectedRows === 1, blockedBy: null }
  }
  const key = run.concurrencyKey
  try {
    return await db.transaction(
      async (tx) => {
        // READ COMMITTED: no gap locks, so two claimers of a free key do not
        // deadlock; the second INSERT waits for the first and then sees its row.
        const ins = await tx.run('INSERT IGNORE INTO concurrency_locks (lock_key, run_id) VALUES (?, ?)', [
          key,
          run.id,
        ])
        if (ins.affectedRows !== 1) {
          const [lock] = await tx.execute<Raw>(
            'SELECT run_id FROM concurrency_locks WHERE lock_key = ? FOR UPDATE',
            [key],
          )
          const holderId = lock ? Number(lock.run_id) : null
          if (holderId !== null && holderId !== run.id) {
            const [holder] = await tx.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [holderId])
            if (holder && (KEY_HOLDING as readonly string[]).includes(String(holder.status))) {
              return { claimed: false, blockedBy: holderId }
            }
            // The recorded holder ended (or vanished) without releasing: take over.
          }
          const took = await tx.run(
            'UPDATE concurrency_locks SET run_id = ?, acquired_at = NOW(3) WHERE lock_key = ?',
            [run.id, key],
          )
          // The row vanished between the duplicate check and the read: do not
          // claim without a lock; the next tick tries again.
          if (took.affectedRows !== 1) throw new ClaimLost()
        }
        const res = await tx.run(`${claimSql} AND concurrency_key = ?`, [
          owner,
          leaseUntil,
          leaseUntil,
          run.id,
          now,
          key,
        ])
        if (res.affectedRows !== 1) {
          // Someone else moved the run; leave no lock behind for it.
          throw new ClaimLost()
        }
        return { claimed: true, blockedBy: null }
      },
      { isolation: 'READ COMMITTED' },
    )
  } catch (err) {
    if (err instanceof ClaimLost) {
      return { claimed: false, blockedBy: null }
    }
    // A deadlock or a duplicate between two claimers is a lost race, not a failure.
    if (isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK) || isDbErrno(err, DB_ERRNO.DUP_ENTRY)) {
      return { claimed: false, blockedBy: null }
    }
    throw err
  }
}

class ClaimLost extends Error {}

/**
 * Lock up to `limit` due, key-less, scheduled runs for the caller's start
 * transaction, oldest due first. `SKIP LOCKED` passes over runs another instance
 * is starting at this moment instead of waiting for them. The row locks are the
 * claim: held only until the caller's transaction commits, which moves every
 * run it starts on with {@link markStarted}, so no transaction outlives it.
 *
 * The grace window is the caller's to check: a locking read that joined the
 * definitions would lock their rows as well, and serialise every starter on them.
 */
export async function lockDueToStart(tx: Queryable, now: Date, limit: number): Promise<RunRow[]> {
  const n = clampLimit(limit, 100, 1, 5000)
  // Walk the due index in order and stop at the limit. A plan that sorted
  // instead (the optimiser's pick on a small table) would lock every due row it
  // read before sorting, and a second instance would then find nothing to start.
  const rows = await tx.query<Raw>(
    `${SELECT_RUN} FORCE INDEX (idx_evrun_wake)
      WHERE r.wake_at <= ? AND r.status = 'scheduled' AND r.concurrency_key IS NULL
      ORDER BY r.wake_at, r.id
      LIMIT ${n}
      FOR UPDATE SKIP LOCKED`,
    [now],
  )
  return rows.map(hydrate)
}

/** Where {@link markStarted} leaves runs: finished, or claimed by the starter for what remains. */
export type StartedAs =
  | { status: 'completed'; phase: string | null }
  | { status: 'running' | 'ending'; phase: string | null; owner: string; token: string; leaseUntil: Date }
  /** In flight without a claim, due at `wakeAt` (the starter spent its step budget). */
  | { status: 'running' | 'ending'; phase: string | null; owner?: undefined; wakeAt: Date }

/**
 * The start transaction's guarded move out of `scheduled`, for runs that
 * {@link lockDueToStart} locked: straight to `completed` when every step ran in
 * that transaction, otherwise to `running`/`ending` under the starter's lease.
 * Answers how many moved; the caller holds their locks, so anything short of
 * all of them is a bug it must roll back.
 */
export async function markStarted(tx: Queryable, ids: readonly number[], as: StartedAs): Promise<number> {
  if (ids.length === 0) return 0
  // The same SET clauses as every guarded transition (a terminal target stamps
  // ended_at and drops claim and wake_at), plus the start's own.
  let wakeAt: Date | undefined
  let claim: [owner: string, token: string, until: Date] | null = null
  if (as.status !== 'completed') {
    if (as.owner !== undefined) {
      claim = [as.owner, as.token, as.leaseUntil]
      wakeAt = as.leaseUntil
    } else {
      wakeAt = as.wakeAt
    }
  }
  const { sets, args } = transitionSets(as.status, { phase: as.phase, ...(wakeAt && { wakeAt }) })
  sets.push('started_at = NOW(3)')
  if (claim) {
    sets.push('claimed_by = ?', 'claim_token = ?', 'claim_expires_at = ?')
    args.push(...claim)
  }
  const res = await tx.runQuery(
    `UPDATE event_runs SET ${sets.join(', ')}
      WHERE id IN (${placeholders(ids.length)}) AND status = 'scheduled'`,
    [...args, ...ids],
  )
  return res.affectedRows
}

/**
 * Lease a run already in flight so one tick works on it at a time; status is
 * unchanged. **A live lease is not re-enterable, not even by its owner**: a tick
 * that overran would otherwise advance one run twice at once. The lease also
 * moves `wake_at` to its expiry, so a crashed owner's run comes due by itself.
 */
export async function claimTick(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
  now: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = ?, claim_expires_at = ?, claim_token = NULL, wake_at = ?
      WHERE id = ? AND status IN (${placeholders(IN_FLIGHT.length)})
        AND (claim_expires_at IS NULL OR claim_expires_at < ?)`,
    [owner, leaseUntil, leaseUntil, id, ...IN_FLIGHT, now],
  )
  return res.affectedRows === 1
}

/** {@link claimTick} for up to `limit` due in-flight runs in one statement. */
export async function claimTickBatch(
  db: Queryable,
  owner: string,
  token: string,
  leaseUntil: Date,
  now: Date,
  limit: number,
): Promise<RunRow[]> {
  const n = clampLimit(limit, 100, 1, 5000)
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = ?, claim_token = ?, claim_expires_at = ?, wake_at = ?
      WHERE wake_at <= ? AND status IN (${placeholders(IN_FLIGHT.length)})
        AND (claim_expires_at IS NULL OR claim_expires_at < ?)
      ORDER BY wake_at, id
      LIMIT ${n}`,
    [owner, token, leaseUntil, leaseUntil, now, ...IN_FLIGHT, now],
  )
  if (res.affectedRows === 0) return []
  return findByClaimToken(db, token)
}

/** Push this caller's lease further out (before a long step); false if it lost the lease. */
export async function extendClaim(
  db: Queryable,
  id: number,
  owner: string,
  leaseUntil: Date,
): Promise<boolean> {
  const res = await db.run(
    `UPDATE event_runs SET claim_expires_at = ?, wake_at = ?
      WHERE id = ? AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseUntil, leaseUntil, id, owner, ...IN_FLIGHT],
  )
  return res.affectedRows === 1
}

/**
 * Renew this caller's leases on `ids` and answer the ids it still holds. A
 * claim taken early in a long tick (many keyed runs to try, a slow database)
 * can expire before the tick gets to the run, and another instance may then
 * have taken the run over: only the runs answered here are still the caller's
 * to start and advance. Two statements, whatever the number of runs.
 */
export async function renewClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  leaseUntil: Date,
): Promise<Set<number>> {
  if (ids.length === 0) return new Set()
  await db.runQuery(
    `UPDATE event_runs SET claim_expires_at = ?, wake_at = ?
      WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ? AND status IN (${placeholders(IN_FLIGHT.length)})`,
    [leaseUntil, leaseUntil, ...ids, owner, ...IN_FLIGHT],
  )
  const rows = await db.query<Raw>(
    `SELECT id FROM event_runs WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ?`,
    [...ids, owner],
  )
  return new Set(rows.map((r) => Number(r.id)))
}

/**
 * Give a run back. Scoped to `claimed_by = owner`: a process releases only its
 * own claim. `wakeAt` says when the run next needs the runner: now (the default)
 * to pick it up at once, a timer's end, or null for a run parked on a cue. A run
 * parked or waiting carries no lease: otherwise every wait would last
 * max(wait, lease).
 */
export async function releaseClaim(
  db: Queryable,
  id: number,
  owner: string,
  opts: { wakeAt?: Date | null } = {},
): Promise<boolean> {
  const wake = opts.wakeAt === undefined ? new Date() : opts.wakeAt
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE id = ? AND claimed_by = ?`,
    [...IN_FLIGHT, wake, id, owner],
  )
  return res.affectedRows === 1
}

/** {@link releaseClaim} for many runs with one wake time. */
export async function releaseClaims(
  db: Queryable,
  ids: readonly number[],
  owner: string,
  wakeAt: Date | null,
): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE id IN (${placeholders(ids.length)}) AND claimed_by = ?`,
    [...IN_FLIGHT, wakeAt, ...ids, owner],
  )
  return res.affectedRows
}

/** Release every claim `owner` holds (a stopping runner), in-flight runs due again at `now` (the runner's clock); answers how many. */
export async function releaseAllClaims(db: Queryable, owner: string, now: Date): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs
        SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL,
            wake_at = IF(status IN (${placeholders(IN_FLIGHT.length)}), ?, wake_at)
      WHERE claimed_by = ?`,
    [...IN_FLIGHT, now, owner],
  )
  return res.affectedRows
}

/** Options of {@link transition}. */
export interface TransitionOptions {
  /** Set `current_phase`. */
  phase?: string | null
  /** Set `last_error` (truncated to 1000 characters); null clears it. */
  error?: string | null
  /** Drop the claim even for a non-terminal move. */
  clearClaim?: boolean
  /** Set `wake_at` (a terminal or paused target clears it regardless). */
  wakeAt?: Date | null
}

function transitionSets(to: RunStatus, opts: TransitionOptions): { sets: string[]; args: SqlValue[] } {
  // Every status move hands back the row's start reserve (migration 0003): the
  // first one, out of `scheduled`, is the one that grows the row.
  const sets = ['status = ?', 'start_reserve = NULL']
  const args: SqlValue[] = [to]
  if (opts.phase !== undefined) {
    sets.push('current_phase = ?')
    args.push(opts.phase)
  }
  if (opts.error !== undefined) {
    sets.push('last_error = ?')
    args.push(opts.error === null ? null : String(opts.error).slice(0, 1000))
  }
  const terminal = isTerminal(to)
  if (terminal) sets.push('ended_at = COALESCE(ended_at, NOW(3))')
  if (terminal || opts.clearClaim)
    sets.push('claimed_by = NULL', 'claim_expires_at = NULL', 'claim_token = NULL')
  if (terminal || to === 'paused') sets.push('wake_at = NULL')
  else if (opts.wakeAt !== undefined) {
    sets.push('wake_at = ?')
    args.push(opts.wakeAt)
  }
  return { sets, args }
}

/**
 * A guarded status move `from → to` that reports whether it happened. `false` is
 * not an error: another worker, or an admin's cancel, won the race. A move into a
 * terminal status stamps `ended_at`, drops the claim and releases the run's
 * concurrency key.
 */
export async function transition(
  db: Queryable,
  id: number,
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions = {},
): Promise<boolean> {
  const froms = Array.isArray(from) ? from : [from as RunStatus]
  const { sets, args } = transitionSets(to, opts)
  // Terminal statuses are never left, whatever `from` a caller names.
  const res = await db.run(
    `UPDATE event_runs SET ${sets.join(', ')}
      WHERE id = ? AND status IN (${placeholders(froms.length)}) AND status NOT IN (${placeholders(TERMINAL.length)})`,
    [...args, id, ...froms, ...TERMINAL],
  )
  const applied = res.affectedRows === 1
  if (applied && isTerminal(to)) await releaseKey(db, [id])
  return applied
}

/** {@link transition} for many runs at once; answers how many moved. */
export async function transitionMany(
  db: Queryable,
  ids: readonly number[],
  from: RunStatus | readonly RunStatus[],
  to: RunStatus,
  opts: TransitionOptions = {},
): Promise<number> {
  if (ids.length === 0) return 0
  const froms = Array.isArray(from) ? from : [from as RunStatus]
  const { sets, args } = transitionSets(to, opts)
  const res = await db.runQuery(
    `UPDATE event_runs SET ${sets.join(', ')}
      WHERE id IN (${placeholders(ids.length)}) AND status IN (${placeholders(froms.length)})
        AND status NOT IN (${placeholders(TERMINAL.length)})`,
    [...args, ...ids, ...froms, ...TERMINAL],
  )
  if (res.affectedRows > 0 && isTerminal(to)) await releaseKey(db, ids)
  return res.affectedRows
}

/**
 * Drop the key locks held by these runs (only once they are no longer
 * key-holding: a lock whose run is still live stays).
 */
export async function releaseKey(db: Queryable, runIds: readonly number[]): Promise<number> {
  if (runIds.length === 0) return 0
  const res = await db.runQuery(
    `DELETE l FROM concurrency_locks l JOIN event_runs r ON r.id = l.run_id
      WHERE l.run_id IN (${placeholders(runIds.length)}) AND r.status NOT IN (${placeholders(KEY_HOLDING.length)})`,
    [...runIds, ...KEY_HOLDING],
  )
  return res.affectedRows
}

/** Just this run's status, for a caller that must not act on a stale read. */
export async function statusOf(db: Queryable, id: number): Promise<RunStatus | null> {
  const [row] = await db.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [id])
  return row ? (row.status as RunStatus) : null
}

/** The live fields of many runs in one statement: what subscriptions poll. */
export interface RunStatusSnapshot {
  id: number
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  waitingSteps: number
  updatedAt: Date
}

export async function statusesOf(db: Queryable, ids: readonly number[]): Promise<RunStatusSnapshot[]> {
  if (ids.length === 0) return []
  const rows = await db.query<Raw>(
    `SELECT r.id, r.status, r.health, r.current_phase, r.updated_at, ${WAITING_SUBQUERY} AS waiting_steps
       FROM event_runs r WHERE r.id IN (${placeholders(ids.length)})`,
    [...ids],
  )
  return rows.map((row) => ({
    id: Number(row.id),
    status: row.status as RunStatus,
    health: row.health as RunHealth,
    currentPhase: (row.current_phase as string | null) ?? null,
    waitingSteps: Number(row.waiting_steps ?? 0),
    updatedAt: row.updated_at as Date,
  }))
}

/**
 * Set health without touching status. Guarded on the current value, so a tick
 * that re-observes the same degradation does not restamp `updated_at`.
 */
export async function setHealth(db: Queryable, id: number, health: RunHealth): Promise<boolean> {
  const res = await db.run('UPDATE event_runs SET health = ? WHERE id = ? AND health <> ?', [
    health,
    id,
    health,
  ])
  return res.affectedRows === 1
}

/** Set `current_phase`, guarded on the current value like {@link setHealth}. */
export async function setPhase(db: Queryable, id: number, phase: string): Promise<boolean> {
  const res = await db.run(
    'UPDATE event_runs SET current_phase = ? WHERE id = ? AND NOT (current_phase <=> ?)',
    [phase, id, phase],
  )
  return res.affectedRows === 1
}

/** {@link setPhase} for many runs moving into the same phase. */
export async function setPhaseMany(db: Queryable, ids: readonly number[], phase: string): Promise<number> {
  if (ids.length === 0) return 0
  const res = await db.runQuery(
    `UPDATE event_runs SET current_phase = ? WHERE id IN (${placeholders(ids.length)}) AND NOT (current_phase <=> ?)`,
    [phase, ...ids, phase],
  )
  return res.affectedRows
}

/**
 * Wake a run now (a cue resolved, a step skipped), unless it is paused or terminal.
 *
 * `now` is the caller's clock (the one the runner compares `wake_at` with).
 * Without it the database's NOW(3) is used; but a database clock ahead of the
 * runner's by X would hold every resolved cue back by X (with a test clock,
 * forever), so callers that have a clock pass it.
 */
export async function wakeNow(db: Queryable, id: number, now?: Date): Promise<boolean> {
  const at = now ?? null
  const res = await db.run(
    `UPDATE event_runs SET wake_at = COALESCE(?, NOW(3))
      WHERE id = ? AND status IN (${placeholders(IN_FLIGHT.length)})
        AND (wake_at IS NULL OR wake_at > COALESCE(?, NOW(3))) AND claimed_by IS NULL`,
    [at, id, ...IN_FLIGHT, at],
  )
  return res.affectedRows === 1
}

/**
 * Hold a blocked scheduled run back until `until`, so runs waiting on a key
 * rotate behind newly due ones instead of occupying the head of the due index.
 */
export async function deferStart(db: Queryable, id: number, until: Date): Promise<boolean> {
  const res = await db.run(`UPDATE event_runs SET wake_at = ? WHERE id = ? AND status = 'scheduled'`, [
    until,
    id,
  ])
  return res.affectedRows === 1
}

/**
 * The run holding `key`, other than `exceptRunId`: what the log names when a run
 * is blocked. A NULL key never contends.
 *
 * Read from the key's lock row, the one {@link claimStart} decides on, joined to
 * its run: a lock row outlives its run's key-holding statuses only until the
 * next claimer takes it over, so the run must still be key-holding to count.
 */
export async function concurrencyHolder(
  db: Queryable,
  key: string | null,
  exceptRunId: number,
): Promise<{ id: number; status: RunStatus; definitionId: number } | null> {
  if (!key) return null
  const [row] = await db.execute<Raw>(
    `SELECT r.id, r.status, r.definition_id
       FROM concurrency_locks l JOIN event_runs r ON r.id = l.run_id
      WHERE l.lock_key = ? AND r.id <> ? AND r.status IN (${placeholders(KEY_HOLDING.length)})`,
    [key, exceptRunId, ...KEY_HOLDING],
  )
  return row
    ? { id: Number(row.id), status: row.status as RunStatus, definitionId: Number(row.definition_id) }
    : null
}

/**
 * Release leases whose owner did not come back. **It changes no status and no
 * counter**: the run stays where it was and the next tick picks it up. A sweep
 * that reset rows to their start state once made an attempt ceiling unreachable,
 * so a row cycled forever and never became eligible for retention.
 */
export async function reclaimStale(db: Queryable, now: Date): Promise<number> {
  const res = await db.run(
    `UPDATE event_runs SET claimed_by = NULL, claim_expires_at = NULL, claim_token = NULL
      WHERE status IN (${placeholders(IN_FLIGHT.length)})
        AND claim_expires_at IS NOT NULL AND claim_expires_at < ?`,
    [...IN_FLIGHT, now],
  )
  return res.affectedRows
}

/**
 * Terminal runs that ended before `before`: what the log retention sweep walks.
 * Only terminal runs are ever eligible, which is a bound at all only because
 * every path a run can take reaches a terminal status. `withLogsOnly` skips runs
 * whose logs are already gone, so repeated sweeps make progress.
 */
export async function terminalBefore(
  db: Queryable,
  before: Date,
  limit = 500,
  opts: { withLogsOnly?: boolean } = {},
): Promise<number[]> {
  const n = clampLimit(limit, 500, 1, 5000)
  const logsFilter = opts.withLogsOnly
    ? 'AND EXISTS (SELECT 1 FROM event_run_logs l WHERE l.run_id = event_runs.id)'
    : ''
  const rows = await db.execute<Raw>(
    `SELECT id FROM event_runs
      WHERE status IN (${placeholders(TERMINAL.length)}) AND COALESCE(ended_at, updated_at) < ? ${logsFilter}
      ORDER BY id LIMIT ${n}`,
    [...TERMINAL, before],
  )
  return rows.map((r) => Number(r.id))
}

/** Run counts per status (every status present, zero when none). */
export async function countByStatus(db: Queryable): Promise<Record<RunStatus, number>> {
  const rows = await db.execute<Raw>('SELECT status, COUNT(*) AS n FROM event_runs GROUP BY status')
  const out = Object.fromEntries(RUN_STATUSES.map((status) => [status, 0])) as Record<RunStatus, number>
  for (const r of rows) out[r.status as RunStatus] = Number(r.n)
  return out
}

/**
 * Run counts of the statuses a run is still moving through (every one present,
 * zero when none). It walks only the status index's ranges for those statuses,
 * so its cost follows the runs in flight and scheduled ahead, not the history
 * {@link countByStatus} counts.
 */
export async function countLiveByStatus(
  db: Queryable,
): Promise<Record<(typeof NON_TERMINAL)[number], number>> {
  const rows = await db.execute<Raw>(
    `SELECT status, COUNT(*) AS n FROM event_runs WHERE status IN (${placeholders(NON_TERMINAL.length)}) GROUP BY status`,
    [...NON_TERMINAL],
  )
  const out = Object.fromEntries(NON_TERMINAL.map((status) => [status, 0])) as Record<
    (typeof NON_TERMINAL)[number],
    number
  >
  for (const r of rows) out[r.status as (typeof NON_TERMINAL)[number]] = Number(r.n)
  return out
}

/** How many non-terminal runs are degraded. */
export async function countDegraded(db: Queryable): Promise<number> {
  const [row] = await db.execute<Raw>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE health = 'degraded' AND status IN (${placeholders(NON_TERMINAL.length)})`,
    [...NON_TERMINAL],
  )
  return Number(row?.n ?? 0)
}

/**
 * Scheduled, not-yet-started runs of a definition at or after `from` that were
 * made by the schedule: what a schedule change re-evaluates.
 */
export async function futureScheduled(
  db: Queryable,
  definitionId: number,
  from: Date,
): Promise<{ id: number; scope: string; scheduledFor: Date }[]> {
  const rows = await db.execute<Raw>(
    `SELECT id, scope, scheduled_for FROM event_runs
      WHERE definition_id = ? AND status = 'scheduled' AND scheduled_for >= ? AND started_by = 'schedule'`,
    [definitionId, from],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    scope: String(r.scope),
    scheduledFor: r.scheduled_for as Date,
  }))
}

/**
 * The runs holding any of `keys` right now (key-holding statuses), lowest id
 * first: {@link concurrencyHolder} for many keys in one statement, so the API can
 * show a list of runs with their holders without a query per run. Each row
 * carries the key it was asked for (`requestedKey`): keys compare under the
 * column's collation, so the stored spelling may differ from the requested one.
 */
export async function holdersOfKeys(
  db: Queryable,
  keys: readonly string[],
): Promise<{ requestedKey: string; id: number; status: RunStatus; definitionId: number }[]> {
  if (keys.length === 0) return []
  const wanted = keys.map(() => 'SELECT ? AS k').join(' UNION ALL ')
  const rows = await db.query<Raw>(
    `SELECT w.k AS requested_key, r.id, r.status, r.definition_id
       FROM (${wanted}) w
       JOIN concurrency_locks l ON l.lock_key = w.k
       JOIN event_runs r ON r.id = l.run_id
      WHERE r.status IN (${placeholders(KEY_HOLDING.length)})
      ORDER BY r.id`,
    [...keys, ...KEY_HOLDING],
  )
  return rows.map((r) => ({
    requestedKey: String(r.requested_key),
    id: Number(r.id),
    status: r.status as RunStatus,
    definitionId: Number(r.definition_id),
  }))
}
