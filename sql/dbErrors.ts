/**
 * What a database failure means for the caller: a refusal (a statement the
 * server will not run), a conflict (a transaction that may simply run again),
 * or unavailability (the server cannot be reached now: back off and retry,
 * never fail a run for it). MariaDB error numbers by name, one place.
 */
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
  /**
   * A Galera node that is not part of the primary component (cut off, joining,
   * or still catching up) refuses every statement with this number ("WSREP has
   * not yet prepared node for application use"). Nothing ran.
   */
  WSREP_NOT_READY: 1047,
  /** COMMIT failed on the server's side (Galera: a partition during commit). */
  ERROR_DURING_COMMIT: 1180,
  /** The server killed this connection (Galera does so when a node drops out). */
  CONNECTION_KILLED: 1927,
  /** The statement was cut short by a `KILL QUERY` (a runner's doorbell rung). */
  QUERY_INTERRUPTED: 1317,
  /** `KILL` named a connection the server does not have (gone, or on another server). */
  NO_SUCH_THREAD: 1094,
} as const

/**
 * Server answers that mean "this server cannot take work right now", not "this
 * statement is wrong": callers back off and try again, never fail a run on them.
 */
export const UNAVAILABLE_ERRNOS: ReadonlySet<number> = new Set([
  DB_ERRNO.SERVER_SHUTDOWN,
  DB_ERRNO.CON_COUNT,
  DB_ERRNO.WSREP_NOT_READY,
  DB_ERRNO.ERROR_DURING_COMMIT,
  DB_ERRNO.CONNECTION_KILLED,
])

/**
 * Unavailability that is certain to have left nothing behind: the connection
 * was never made, or the node refused before running anything. Only these are
 * sent again to the next host of a cluster at once; a connection lost mid-way
 * may or may not have committed, so that is the caller's to retry.
 */
const NOTHING_RAN_CODES = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'ENOENT',
  'ER_CON_COUNT_ERROR',
])
export function nothingRan(err: unknown): boolean {
  const e = (err instanceof DatabaseError ? err.cause : err) as { code?: string; errno?: number } | undefined
  return (
    (e?.code !== undefined && NOTHING_RAN_CODES.has(e.code)) ||
    e?.errno === DB_ERRNO.WSREP_NOT_READY ||
    e?.errno === DB_ERRNO.CON_COUNT
  )
}

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
      (c?.errno !== undefined && UNAVAILABLE_ERRNOS.has(c.errno)) ||
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

/** True for the failures after which a whole transaction may simply run again. */
export function isConflict(err: unknown): boolean {
  return isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK) || isDbErrno(err, DB_ERRNO.LOCK_WAIT_TIMEOUT)
}

/** mysql2's message when a pool's wait queue is full (it sets no code). */
const POOL_QUEUE_FULL = 'Queue limit reached.'

/** True when `err` (or its cause) says every connection is busy and the wait queue is full. */
export function isPoolBusy(err: unknown): boolean {
  const inner = err instanceof DatabaseError ? err.cause : err
  return (inner as { message?: unknown })?.message === POOL_QUEUE_FULL
}
