/**
 * The one database handle: a mysql2 promise pool, UTC end to end.
 *
 * Every repository in `sql/` takes a {@link Db} as its first argument rather than
 * importing a module-level pool, so one process can hold several (the tests run
 * three runner instances side by side; a benchmark talks to two databases).
 */
import mysql, { type Pool, type PoolConnection, type ResultSetHeader } from 'mysql2/promise'
import { type DbOptions, parseDatabaseUrl, poolOptionsFromUrl } from './databaseUrl.ts'
import { DatabaseError, DB_ERRNO, isConflict, isDbErrno, isDbUnavailable, nothingRan } from './dbErrors.ts'
import type { Db, DbStats, Queryable, Transaction, TransactionOptions } from './dbTypes.ts'
import { HostRouter } from './hostRouter.ts'
import {
  answersOf,
  type BatchAnswer,
  joinStatements,
  partsBySize,
  type SqlValue,
  type Statement,
} from './statements.ts'

// Callers import errors and URL parsing from here, beside the pool.
export * from './databaseUrl.ts'
export * from './dbErrors.ts'
// The handle's types (Db, Transaction, Queryable and their options).
export type * from './dbTypes.ts'
// Statements, their values and the answers of a batch, beside the pool too.
export * from './statements.ts'

/** Attempts in all for a {@link TransactionOptions.retryable} transaction. */
export const TRANSACTION_ATTEMPTS = 8

/** Full-jitter exponential backoff: up to 5 ms, 10 ms, 20 ms … capped at 250 ms. */
function conflictPause(attempt: number): Promise<void> {
  const cap = Math.min(250, 5 * 2 ** (attempt - 1))
  return new Promise((r) => setTimeout(r, Math.random() * cap))
}

function wrap(err: unknown, what: string): DatabaseError {
  if (err instanceof DatabaseError) return err
  const e = err as { code?: string; errno?: number; sqlMessage?: string; message?: string }
  const detail = e?.code ?? 'unknown error'
  const unavailable = new DatabaseError('', err).unavailable
  const message = unavailable
    ? `The database is unavailable (${detail}). Check that MariaDB is running and DATABASE_URL is right.`
    : `The database refused ${what} (${detail}${e?.errno ? ` ${e.errno}` : ''}).`
  return new DatabaseError(message, err)
}

/**
 * InnoDB may pick an autocommit statement as a deadlock victim when several
 * instances sweep the same index at once. The victim statement was rolled back
 * whole, so sending it again is safe; only a statement outside a transaction is
 * retried (inside one, the whole transaction must be retried by its owner).
 */
const DEADLOCK_RETRIES = 5

/** Call `fn` up to `attempts` times while it fails as a deadlock victim, with a short jittered pause. */
async function retryDeadlocks<T>(attempts: number, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn()
    } catch (err) {
      if (attempt >= attempts || !isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK)) throw err
      await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt))
    }
  }
}

/** How a statement reaches the server: prepared (`execute`) or text protocol (`query`). */
type Send = (how: 'execute' | 'query', sql: string, params: SqlValue[]) => Promise<unknown>

function makeQueryable(send: Send, stats: DbStats, autocommit: boolean): Queryable {
  async function call<T>(how: 'execute' | 'query', sql: string, params: readonly SqlValue[], what: string) {
    stats.statements++
    stats.roundTrips++
    try {
      const [res] = (await retryDeadlocks(autocommit ? DEADLOCK_RETRIES : 1, () =>
        send(how, sql, params as SqlValue[]),
      )) as [T]
      return res
    } catch (err) {
      throw wrap(err, what)
    }
  }
  return {
    async execute<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
      return call<T[]>('execute', sql, params, 'a query')
    },
    async run(sql: string, params: readonly SqlValue[] = []) {
      const res = await call<ResultSetHeader>('execute', sql, params, 'a write')
      return { affectedRows: Number(res.affectedRows), insertId: Number(res.insertId) }
    },
    async query<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
      return call<T[]>('query', sql, params, 'a query')
    },
    async runQuery(sql: string, params: readonly SqlValue[] = []) {
      const res = await call<ResultSetHeader>('query', sql, params, 'a write')
      return { affectedRows: Number(res.affectedRows), insertId: Number(res.insertId) }
    },
    async batch(statements: readonly Statement[]): Promise<BatchAnswer[]> {
      if (statements.length === 0) return []
      stats.statements += statements.length
      stats.roundTrips++
      const { sql, params } = joinStatements(statements)
      try {
        const [res] = (await send('query', sql, params)) as [unknown]
        return answersOf(res, statements.length)
      } catch (err) {
        throw wrap(err, 'a batch of statements')
      }
    },
  }
}

function sendOn(target: Pool | PoolConnection): Send {
  return (how, sql, params) => (how === 'execute' ? target.execute(sql, params) : target.query(sql, params))
}

/** How far a transaction's attempt got: connecting, its statements, its COMMIT, or past it. */
type Stage = 'connect' | 'body' | 'commit' | 'committed'

/**
 * An attempt's progress: its {@link Stage}, and whether its BEGIN was sent
 * (with the first statement: see {@link transactionOn}).
 */
interface Progress {
  at: Stage
  begun: boolean
}

/**
 * A transaction's statements on `conn`. Its BEGIN (with the isolation level
 * asked for) is sent with its first statement: in that statement's text
 * when it goes over the text protocol (a `query`, a `batch`, the
 * `commitWith`), a round trip fewer for every transaction; on its own
 * before a prepared statement, which cannot share a text. `commitWith`
 * moves `progress` as the COMMIT it carries goes through.
 */
function transactionOn(
  conn: PoolConnection,
  stats: DbStats,
  progress: Progress,
  isolation: TransactionOptions['isolation'],
): Transaction {
  const tx = makeQueryable(sendOn(conn), stats, false)
  const opening = (): Statement[] => {
    if (progress.begun) return []
    const begin = { sql: 'START TRANSACTION', params: [] }
    return isolation ? [{ sql: `SET TRANSACTION ISOLATION LEVEL ${isolation}`, params: [] }, begin] : [begin]
  }
  /** `statements` with the BEGIN in front when it is still to be sent; their own answers. */
  const opened = async (statements: readonly Statement[]): Promise<BatchAnswer[]> => {
    const first = opening()
    if (first.length === 0) return tx.batch(statements)
    // Begun once sent, even should a statement after it fail: the transaction is open until rolled back.
    progress.begun = true
    return (await tx.batch([...first, ...statements])).slice(first.length)
  }
  /** A prepared statement cannot share a text: the BEGIN goes alone first. */
  const begun = async () => {
    const first = opening()
    progress.begun = true
    if (first.length > 0) await tx.batch(first)
  }
  return {
    async execute(sql, params) {
      await begun()
      return tx.execute(sql, params)
    },
    async run(sql, params) {
      await begun()
      return tx.run(sql, params)
    },
    async query<T>(sql: string, params: readonly SqlValue[] = []) {
      if (progress.begun) return tx.query<T>(sql, params)
      const [answer] = await opened([{ sql, params }])
      return (answer?.rows ?? []) as T[]
    },
    async runQuery(sql, params = []) {
      if (progress.begun) return tx.runQuery(sql, params)
      const [answer] = await opened([{ sql, params }])
      return { affectedRows: answer?.affectedRows ?? 0, insertId: answer?.insertId ?? 0 }
    },
    async batch(statements) {
      if (statements.length === 0) return []
      return opened(statements)
    },
    async commitWith(statements) {
      if (progress.at !== 'body')
        throw new Error("commitWith is a transaction's last statement; it was sent already.")
      const first = opening()
      const parts = partsBySize([...first, ...statements, { sql: 'COMMIT', params: [] }])
      const answers: BatchAnswer[] = []
      progress.begun = true
      for (const [i, part] of parts.entries()) {
        // The COMMIT's answer is the last part's last; a failure before that part means it never ran.
        if (i === parts.length - 1) progress.at = 'commit'
        answers.push(...(await tx.batch(part)))
      }
      progress.at = 'committed'
      return answers.slice(first.length, first.length + statements.length)
    },
  }
}

/** Open a pool for `url` (one per host it lists). No connection is made until the first statement. */
export function createDb(url: string, opts: DbOptions = {}): Db {
  const hostCount = Math.max(1, parseDatabaseUrl(url).hosts.length)
  const causalReads = opts.causalReads ?? true
  const pools = Array.from({ length: hostCount }, (_, i) => {
    const pool = mysql.createPool(poolOptionsFromUrl(url, opts, i))
    // Pin every session to UTC before it runs anything else; commands on one
    // connection run in order, so this lands before the first real statement.
    pool.pool.on('connection', (conn) => {
      conn.query("SET time_zone = '+00:00'")
      if (causalReads) {
        // Decided by the server in the same statement (no round trip that a first
        // real statement could overtake): 1 on a Galera node, unchanged elsewhere.
        // A server built without Galera support has no such variable; nothing to do there.
        conn.query(
          'SET SESSION wsrep_sync_wait = IF(@@global.wsrep_on, 1, @@session.wsrep_sync_wait)',
          () => {},
        )
      }
    })
    return pool
  })
  const router = new HostRouter(pools)
  const stats: DbStats = { statements: 0, roundTrips: 0 }
  const base = makeQueryable(
    (how, sql, params) => router.send((pool) => sendOn(pool)(how, sql, params)),
    stats,
    true,
  )

  /** One attempt; `stage` tells the caller how far it got when it failed. */
  async function transactionOnce<T, R>(
    pool: Pool,
    fn: (tx: Transaction) => Promise<T>,
    then: (conn: Queryable, committed: T) => Promise<R>,
    txOpts: TransactionOptions | undefined,
    stage: Progress,
  ): Promise<R> {
    let conn: PoolConnection
    try {
      conn = await pool.getConnection()
    } catch (err) {
      throw wrap(err, 'a connection')
    }
    stage.at = 'body'
    try {
      const result = await fn(transactionOn(conn, stats, stage, txOpts?.isolation))
      // Nothing sent: nothing to commit, and no BEGIN was either.
      if (stage.at === 'body' && !stage.begun) stage.at = 'committed'
      if (stage.at === 'body') {
        stats.statements++
        stats.roundTrips++
        stage.at = 'commit'
        // On Galera a certification failure surfaces here (1213), after every
        // statement above reported success: `result` counts only once this returns.
        await conn.commit()
        stage.at = 'committed'
      } else if (stage.at !== 'committed') {
        throw new Error('A transaction went on after its commitWith failed.')
      }
      return await then(makeQueryable(sendOn(conn), stats, true), result)
    } catch (err) {
      // After the commit there is nothing to roll back; the statement's error is the one to report.
      if (stage.at === 'committed') throw err
      try {
        await conn.rollback()
      } catch {
        // The connection is already broken; the original error is the one to report.
      }
      // Application errors thrown by `fn` pass through unchanged; only driver
      // failures (begin/commit on a broken connection) are wrapped.
      const driverError = (err as { sqlState?: string; errno?: number })?.errno !== undefined
      throw driverError || isDbUnavailable(err) ? wrap(err, 'a transaction') : err
    } finally {
      conn.release()
    }
  }

  /** Attempts of a transaction, retried on a conflict and moved to another host when nothing can have been kept. */
  async function runTransaction<T, R>(
    fn: (tx: Transaction) => Promise<T>,
    then: (conn: Queryable, committed: T) => Promise<R>,
    txOpts: TransactionOptions | undefined,
  ): Promise<R> {
    const attempts = txOpts?.retryable ? TRANSACTION_ATTEMPTS : 1
    let hostsTried = 1
    for (let attempt = 1; ; attempt++) {
      const pool = router.pool
      const stage: Progress = { at: 'connect', begun: false }
      try {
        return await transactionOnce(pool, fn, then, txOpts, stage)
      } catch (err) {
        // Committed: what failed came after, and repeating the transaction would apply it twice.
        if (stage.at === 'committed') throw err
        if (isDbUnavailable(err)) {
          router.failed(pool)
          // Another host, when nothing can have been kept: no connection was
          // made, or (for a transaction safe to repeat) COMMIT was never sent.
          const nothingKept = stage.at === 'connect' || (txOpts?.retryable === true && stage.at === 'body')
          if (hostsTried < pools.length && nothingKept && (nothingRan(err) || stage.at === 'body')) {
            hostsTried++
            continue
          }
          throw err
        }
        if (attempt >= attempts || !isConflict(err)) throw err
        await conflictPause(attempt)
      }
    }
  }

  return {
    ...base,
    get pool() {
      return router.pool
    },
    stats,
    transaction(fn, txOpts) {
      return runTransaction(fn, async (_conn, committed) => committed, txOpts)
    },
    transactionThen(fn, then, txOpts) {
      return runTransaction(fn, then, txOpts)
    },
    async commitAll(statements, txOpts) {
      if (statements.length === 0) return []
      return runTransaction(
        (tx) => tx.commitWith(statements),
        async (_conn, committed) => committed,
        {
          retryable: txOpts?.retryable === true,
        },
      )
    },
    async withConnection(fn) {
      const pool = router.pool
      let conn: PoolConnection
      try {
        conn = await pool.getConnection()
      } catch (err) {
        if (isDbUnavailable(err)) router.failed(pool)
        throw wrap(err, 'a connection')
      }
      try {
        return await fn(makeQueryable(sendOn(conn), stats, true))
      } catch (err) {
        // The next caller goes to the next host, as after a failed statement.
        if (isDbUnavailable(err)) router.failed(pool)
        throw err
      } finally {
        conn.release()
      }
    },
    async ping() {
      try {
        await base.query('SELECT 1')
        return true
      } catch {
        return false
      }
    },
    async openConnection() {
      // The pool's own settings are not a connection's (mysql2 warns of each it does not know).
      const { connectionLimit, queueLimit, waitForConnections, maxIdle, idleTimeout, ...options } =
        poolOptionsFromUrl(url, opts, router.hostIndex)
      try {
        const conn = await mysql.createConnection(options)
        // A connection lost with no statement under way would otherwise be thrown at the
        // process; the next statement on it fails, and that caller handles it.
        conn.on('error', () => {})
        await conn.query("SET time_zone = '+00:00'")
        return conn
      } catch (err) {
        throw wrap(err, 'a connection')
      }
    },
    async close() {
      await Promise.all(pools.map((p) => p.end()))
    },
  }
}
