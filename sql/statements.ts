/**
 * What a statement is made of (its SQL and values), and a batch of them sent
 * as one text: `Queryable.batch` and a transaction's `commitWith` (db.ts).
 */
import type { ResultSetHeader, RowDataPacket } from 'mysql2/promise'

/** A value a statement may bind. */
export type SqlValue = string | number | bigint | boolean | Date | Buffer | null
export type Row = RowDataPacket & Record<string, unknown>

/** One statement of a {@link Queryable.batch}: its SQL with `?` placeholders and their values. */
export interface Statement {
  readonly sql: string
  readonly params: readonly SqlValue[]
}

/**
 * A write whose count of rows is known before it is sent (`affects`): any
 * other count is a bug, found once its answer is back ({@link checkAffected}).
 */
export interface CountedStatement extends Statement {
  readonly affects?: number
  /** What its rows are, for the error: "log lines of shared steps". */
  readonly rowsOf?: string
}

/** Throws when a {@link CountedStatement} wrote another number of rows than it must. */
export function checkAffected(st: CountedStatement, affectedRows: number): void {
  if (st.affects !== undefined && affectedRows !== st.affects)
    throw new Error(`wrote ${affectedRows} of ${st.affects} ${st.rowsOf ?? 'rows'}`)
}

/** What one statement of a batch answered: its rows (a read) or its counts (a write). */
export interface BatchAnswer {
  rows: Row[]
  affectedRows: number
  insertId: number
}

/**
 * How large one text may grow: a multi-row statement's values (json.ts
 * `chunkRows`), and a batch that must not be cut (a transaction's last
 * writes) before it is sent in parts. A quarter of MariaDB's default
 * `max_allowed_packet` (16 MiB), so escaping and multi-byte text cannot reach it.
 */
export const BATCH_TEXT_BYTES = 4 * 1024 * 1024

/** An upper bound of the bytes a value takes once escaped into the text. */
function valueBytes(v: SqlValue): number {
  if (typeof v === 'string') return 2 * Buffer.byteLength(v) + 2
  if (Buffer.isBuffer(v)) return 2 * v.length + 3
  return 32
}

/** An upper bound of a statement's bytes once its values are in the text. */
export function statementBytes(st: Statement): number {
  let bytes = Buffer.byteLength(st.sql) + 2
  for (const v of st.params) bytes += valueBytes(v)
  return bytes
}

/**
 * `items` in order, cut into pieces of at most `maxBytes` (as `size` counts
 * them) and `maxCount` items each; an item over the byte budget alone still
 * gets a piece of its own. The rows of a multi-row statement (json.ts
 * `chunkRows`) and the statements of one text ({@link partsBySize}) are cut so.
 */
export function cutBySize<T>(
  items: readonly T[],
  size: (item: T) => number,
  maxBytes: number,
  maxCount = Number.POSITIVE_INFINITY,
): T[][] {
  const pieces: T[][] = []
  let piece: T[] = []
  let bytes = 0
  for (const item of items) {
    const b = size(item)
    if (piece.length > 0 && (piece.length >= maxCount || bytes + b > maxBytes)) {
      pieces.push(piece)
      piece = []
      bytes = 0
    }
    piece.push(item)
    bytes += b
  }
  if (piece.length > 0) pieces.push(piece)
  return pieces
}

/**
 * The statements in order, cut into texts of at most `maxBytes` each (a
 * statement larger than that alone goes as a text of its own): the producers
 * chunk their rows, so one statement stays well under the server's limit.
 */
export function partsBySize(statements: readonly Statement[], maxBytes = BATCH_TEXT_BYTES): Statement[][] {
  return cutBySize(statements, statementBytes, maxBytes)
}

/**
 * Send `statements` one by one on `db` (each its own round trip, as a
 * repository's one-shot form does), checking each {@link CountedStatement}'s
 * count as it answers; answers the rows they affected in all.
 */
export async function runEach(
  db: { runQuery(sql: string, params: readonly SqlValue[]): Promise<{ affectedRows: number }> },
  statements: readonly CountedStatement[],
): Promise<number> {
  let affected = 0
  for (const st of statements) {
    const { affectedRows } = await db.runQuery(st.sql, st.params)
    checkAffected(st, affectedRows)
    affected += affectedRows
  }
  return affected
}

/** The statements as one text: the placeholders stay, their values in order. */
export function joinStatements(statements: readonly Statement[]): { sql: string; params: SqlValue[] } {
  return {
    sql: statements.map((st) => st.sql).join(';\n'),
    params: statements.flatMap((st) => st.params as SqlValue[]),
  }
}

/** mysql2 answers a lone statement as itself, several as a list of answers. */
export function answersOf(res: unknown, count: number): BatchAnswer[] {
  const list = (count === 1 ? [res] : res) as unknown[]
  return list.map((one) =>
    Array.isArray(one)
      ? { rows: one as Row[], affectedRows: 0, insertId: 0 }
      : {
          rows: [],
          affectedRows: Number((one as ResultSetHeader).affectedRows),
          insertId: Number((one as ResultSetHeader).insertId),
        },
  )
}
