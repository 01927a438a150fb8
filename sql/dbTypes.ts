/**
 * What the database handle offers, as types: the pool ({@link Db}), a
 * transaction's connection ({@link Transaction}), what both run statements
 * with ({@link Queryable}), and the options and counters beside them. The
 * implementation is sql/db.ts, which re-exports these.
 */
import type { Connection, Pool } from 'mysql2/promise'
import type { BatchAnswer, Row, SqlValue, Statement } from './statements.ts'

export interface TransactionOptions {
  isolation?: 'READ COMMITTED'
  /**
   * Run `fn` again from the start, on a fresh transaction, when the transaction
   * lost a conflict and was rolled back whole: an InnoDB deadlock victim or a
   * Galera certification failure (both 1213, the latter at COMMIT, after every
   * statement reported success) or a lock wait timeout (1205); and, with
   * several hosts, when the node became unavailable before COMMIT was sent (the
   * next attempt goes to the next host). Jittered backoff between attempts.
   *
   * Only for an `fn` that is safe to repeat: no effect outside the transaction,
   * and every decision it answers is made from what its own statements saw, so
   * the answer of the attempt that committed is the one returned. After the
   * last attempt the error is the caller's. @default false
   */
  retryable?: boolean
}

/** What a {@link Db} has sent: statements, and the round trips that carried them. */
export interface DbStats {
  statements: number
  roundTrips: number
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
  /**
   * Several statements in one round trip (text protocol, every value escaped
   * by the driver as for {@link query}), each one's answer in order. A
   * statement that fails stops the rest. Outside a transaction each is its
   * own autocommit, and a failed batch is not sent again (some of it may
   * have been kept).
   */
  batch(statements: readonly Statement[]): Promise<BatchAnswer[]>
}

/** A transaction's connection: statements, and the last batch sent with its COMMIT. */
export interface Transaction extends Queryable {
  /**
   * `statements`, then COMMIT, in one round trip: the transaction's last
   * writes. Once it answers, the transaction is committed; the function it
   * was given must return without another statement. A statement that fails
   * stops the batch there, COMMIT included, and the transaction is rolled
   * back (and retried, when retryable, on a conflict) as after any failure.
   * A text that would pass `BATCH_TEXT_BYTES` (statements.ts) goes in
   * parts, a round trip each, the COMMIT with the last.
   */
  commitWith(statements: readonly Statement[]): Promise<BatchAnswer[]>
}

export interface Db extends Queryable {
  readonly pool: Pool
  /**
   * Statements sent since creation, and the round trips that carried them
   * (a batch is one); tests use them to prove batching.
   */
  readonly stats: DbStats
  /**
   * Run `fn` inside a short transaction on one connection; commits on return,
   * rolls back on throw. Keep it short: nothing here waits on a person or a
   * network call.
   */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, opts?: TransactionOptions): Promise<T>
  /**
   * `statements` as one transaction of their own, its BEGIN and COMMIT in the
   * same text (one round trip, or a few for a text past `BATCH_TEXT_BYTES`):
   * writes that need nothing from each other's answers and must be kept or
   * lost together. Answers each statement's answer in order. A failed one
   * rolls the whole back; `retryable` runs it again on a conflict, as
   * {@link transaction} does.
   */
  commitAll(
    statements: readonly Statement[],
    opts?: Pick<TransactionOptions, 'retryable'>,
  ): Promise<BatchAnswer[]>
  /**
   * {@link transaction}, then `then` on the same connection once the commit is
   * through (each statement its own autocommit): work that follows a commit
   * and must not queue for the pool again, where a full queue would refuse it
   * after the transaction already counted. Only the connection's acquisition
   * can be refused. Nothing after the commit is retried or undone: a failure
   * there is thrown as it is.
   */
  transactionThen<T, R>(
    fn: (tx: Transaction) => Promise<T>,
    then: (conn: Queryable, committed: T) => Promise<R>,
    opts?: TransactionOptions,
  ): Promise<R>
  /**
   * `fn` on one pool connection taken once, each statement its own
   * autocommit: reads that follow one another and must not queue for the
   * pool again between them (a full queue makes each acquisition a wait).
   */
  withConnection<T>(fn: (conn: Queryable) => Promise<T>): Promise<T>
  /** True when a trivial query succeeds within the pool's connect timeout. */
  ping(): Promise<boolean>
  /**
   * A connection of its own, outside the pool, to the host the pool is on now
   * (UTC like the pool's): for a statement that holds its connection for
   * long, such as a runner's doorbell. The caller ends it.
   */
  openConnection(): Promise<Connection>
  close(): Promise<void>
}
