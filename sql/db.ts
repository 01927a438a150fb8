/**
 * The one database handle: a mysql2 promise pool, UTC end to end.
 *
 * Every repository in `sql/` takes a {@link Db} as its first argument rather than
 * importing a module-level pool, so one process can hold several (the tests run
 * three runner instances side by side; a benchmark talks to two databases).
 */
import mysql, {
  type Pool,
  type PoolConnection,
  type PoolOptions,
  type ResultSetHeader,
  type RowDataPacket,
} from 'mysql2/promise'

/** MariaDB/MySQL error numbers the code reacts to, by name. */
export const DB_ERRNO = {
  /** A UNIQUE or PRIMARY key already holds the value. */
  DUP_ENTRY: 1062,
  /** InnoDB picked this transaction as a deadlock victim; retrying is safe. */
  LOCK_DEADLOCK: 1213,
  /** A row lock was not granted within innodb_lock_wait_timeout. */
  LOCK_WAIT_TIMEOUT: 1205,
  /** The database named in the URL does not exist. */
  BAD_DB: 1049,
  /** The server is shutting down. */
  SERVER_SHUTDOWN: 1053,
  /** Too many connections. */
  CON_COUNT: 1040,
  /** A table the query names does not exist (migrations not applied). */
  NO_SUCH_TABLE: 1146,
} as const

/** Driver-level codes that mean "the database cannot be reached right now". */
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOENT',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ER_SERVER_SHUTDOWN',
  'ER_CON_COUNT_ERROR',
  'POOL_CLOSED',
])

/**
 * A database failure with the SQL text kept out of the message: the message is
 * safe to log next to user data, the driver's error stays in `cause` for
 * operators.
 */
export class DatabaseError extends Error {
  override readonly name = 'DatabaseError'
  /** The server's error number, when the server answered. */
  readonly errno: number | undefined
  /** The driver's symbolic code (`ER_DUP_ENTRY`, `ECONNREFUSED`, …). */
  readonly code: string | undefined
  /** True when the server could not be reached, as opposed to refusing a statement. */
  readonly unavailable: boolean

  constructor(message: string, cause: unknown) {
    super(message, { cause })
    const c = cause as { errno?: number; code?: string; fatal?: boolean } | undefined
    this.errno = c?.errno
    this.code = c?.code
    this.unavailable =
      (c?.code !== undefined && UNAVAILABLE_CODES.has(c.code)) ||
      c?.errno === DB_ERRNO.SERVER_SHUTDOWN ||
      c?.errno === DB_ERRNO.CON_COUNT ||
      (c?.fatal === true && c?.errno === undefined)
  }
}

/** True when `err` is a database error with the given errno. */
export function isDbErrno(err: unknown, errno: number): boolean {
  return err instanceof DatabaseError ? err.errno === errno : (err as { errno?: number })?.errno === errno
}

/** True when `err` says the database is unreachable (not that it refused a statement). */
export function isDbUnavailable(err: unknown): boolean {
  if (err instanceof DatabaseError) return err.unavailable
  return new DatabaseError('probe', err).unavailable
}

/** A value a statement may bind. */
export type SqlValue = string | number | bigint | boolean | Date | Buffer | null
export type Row = RowDataPacket & Record<string, unknown>

export interface TransactionOptions {
  isolation?: 'READ COMMITTED'
  /**
   * Attempts in all when InnoDB picks the transaction as a deadlock victim: it
   * was rolled back whole, so `fn` runs again from the start on a fresh
   * transaction. Only for an `fn` that is safe to repeat (no effect outside the
   * transaction). @default 1 (the deadlock is the caller's)
   */
  deadlockAttempts?: number
}

/** Runs statements; implemented by the pool and by a transaction's connection. */
export interface Queryable {
  /** A prepared statement (binary protocol): for fixed-shape statements. */
  execute<T = Row>(sql: string, params?: readonly SqlValue[]): Promise<T[]>
  /** A prepared write; answers affectedRows and insertId. */
  run(sql: string, params?: readonly SqlValue[]): Promise<{ affectedRows: number; insertId: number }>
  /**
   * A client-side-escaped statement (text protocol) for variable-shape SQL such as
   * multi-row inserts and IN lists, which would otherwise fill each connection's
   * prepared-statement cache with one entry per shape. Values are still passed as
   * `?` placeholders and escaped by the driver, never spliced by callers.
   */
  query<T = Row>(sql: string, params?: readonly SqlValue[]): Promise<T[]>
  /** Like {@link run} over the text protocol. */
  runQuery(sql: string, params?: readonly SqlValue[]): Promise<{ affectedRows: number; insertId: number }>
}

export interface Db extends Queryable {
  readonly pool: Pool
  /** Statements sent since creation; tests use it to prove batching. */
  readonly stats: { statements: number }
  /**
   * Run `fn` inside a short transaction on one connection; commits on return,
   * rolls back on throw. Keep it short: nothing here waits on a person or a
   * network call.
   */
  transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T>
  /** True when a trivial query succeeds within the pool's connect timeout. */
  ping(): Promise<boolean>
  close(): Promise<void>
}

/** Options for {@link createDb}. */
export interface DbOptions {
  /** Pool size. @default 10 */
  connectionLimit?: number
  /** Milliseconds to wait for a connection to open. @default 5000 */
  connectTimeout?: number
  /**
   * Statements that may wait for a free connection; one more fails at once
   * with a "busy" error ({@link isPoolBusy}) instead of waiting behind them.
   * @default 0 (unbounded)
   */
  queueLimit?: number
}

/** mysql2's message when a pool's wait queue is full (it sets no code). */
const POOL_QUEUE_FULL = 'Queue limit reached.'

/** True when `err` (or its cause) says every connection is busy and the wait queue is full. */
export function isPoolBusy(err: unknown): boolean {
  const inner = err instanceof DatabaseError ? err.cause : err
  return (inner as { message?: unknown })?.message === POOL_QUEUE_FULL
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

function makeQueryable(
  target: Pool | PoolConnection,
  stats: { statements: number },
  autocommit: boolean,
): Queryable {
  return {
    async execute<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
      stats.statements++
      try {
        const [rows] = await retryDeadlocks(autocommit ? DEADLOCK_RETRIES : 1, () =>
          target.execute<RowDataPacket[]>(sql, params as SqlValue[]),
        )
        return rows as unknown as T[]
      } catch (err) {
        throw wrap(err, 'a query')
      }
    },
    async run(sql: string, params: readonly SqlValue[] = []) {
      stats.statements++
      try {
        const [res] = await retryDeadlocks(autocommit ? DEADLOCK_RETRIES : 1, () =>
          target.execute<ResultSetHeader>(sql, params as SqlValue[]),
        )
        return { affectedRows: Number(res.affectedRows), insertId: Number(res.insertId) }
      } catch (err) {
        throw wrap(err, 'a write')
      }
    },
    async query<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
      stats.statements++
      try {
        const [rows] = await retryDeadlocks(autocommit ? DEADLOCK_RETRIES : 1, () =>
          target.query<RowDataPacket[]>(sql, params as SqlValue[]),
        )
        return rows as unknown as T[]
      } catch (err) {
        throw wrap(err, 'a query')
      }
    },
    async runQuery(sql: string, params: readonly SqlValue[] = []) {
      stats.statements++
      try {
        const [res] = await retryDeadlocks(autocommit ? DEADLOCK_RETRIES : 1, () =>
          target.query<ResultSetHeader>(sql, params as SqlValue[]),
        )
        return { affectedRows: Number(res.affectedRows), insertId: Number(res.insertId) }
      } catch (err) {
        throw wrap(err, 'a write')
      }
    },
  }
}

/**
 * Pool options from a `mysql://user:pass@host:port/db` URL. A `socketPath` query
 * parameter (`?socket=/path/to/mysqld.sock`) selects a unix socket instead of TCP.
 */
export function poolOptionsFromUrl(url: string, opts: DbOptions = {}): PoolOptions {
  let u: URL
  try {
    u = new URL(url)
  } catch (err) {
    throw new Error(`The database URL is not a valid URL; expected mysql://user:pass@host:port/db.`, {
      cause: err,
    })
  }
  if (u.protocol !== 'mysql:' && u.protocol !== 'mariadb:') {
    throw new Error(`The database URL must start with mysql:// (got ${u.protocol}//).`)
  }
  const socketPath = u.searchParams.get('socket') ?? undefined
  const database = decodeURIComponent(u.pathname.replace(/^\//, '')) || undefined
  return {
    host: socketPath ? undefined : u.hostname || '127.0.0.1',
    port: socketPath ? undefined : Number(u.port || 3306),
    socketPath,
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password || ''),
    database,
    connectionLimit: opts.connectionLimit ?? 10,
    connectTimeout: opts.connectTimeout ?? 5000,
    // UTC end to end: mysql2 writes and reads DATETIME as UTC, and every session's
    // time_zone is pinned below so NOW(3) agrees.
    timezone: 'Z',
    dateStrings: false,
    supportBigNumbers: true,
    bigNumberStrings: false,
    decimalNumbers: true,
    waitForConnections: true,
    queueLimit: opts.queueLimit ?? 0,
    enableKeepAlive: true,
    // mysql2 otherwise captures a stack trace for every statement, to graft onto
    // a driver error; ours never reach a user, and the capture cost a tenth of
    // the API's CPU under load (bench/apiLatency.ts).
    trace: false,
    maxIdle: opts.connectionLimit ?? 10,
    idleTimeout: 60_000,
  }
}

/** Open a pool for `url`. No connection is made until the first statement. */
export function createDb(url: string, opts: DbOptions = {}): Db {
  const pool = mysql.createPool(poolOptionsFromUrl(url, opts))
  // Pin every session to UTC before it runs anything else; commands on one
  // connection run in order, so this lands before the first real statement.
  pool.pool.on('connection', (conn) => {
    conn.query("SET time_zone = '+00:00'")
  })
  const stats = { statements: 0 }
  const base = makeQueryable(pool, stats, true)
  return {
    ...base,
    pool,
    stats,
    transaction(fn, txOpts) {
      return retryDeadlocks(txOpts?.deadlockAttempts ?? 1, async () => {
        let conn: PoolConnection
        try {
          conn = await pool.getConnection()
        } catch (err) {
          throw wrap(err, 'a connection')
        }
        try {
          if (txOpts?.isolation) {
            stats.statements++
            await conn.query(`SET TRANSACTION ISOLATION LEVEL ${txOpts.isolation}`)
          }
          stats.statements++
          await conn.beginTransaction()
          const result = await fn(makeQueryable(conn, stats, false))
          stats.statements++
          await conn.commit()
          return result
        } catch (err) {
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
      })
    },
    async ping() {
      try {
        await base.query('SELECT 1')
        return true
      } catch {
        return false
      }
    },
    async close() {
      await pool.end()
    },
  }
}
