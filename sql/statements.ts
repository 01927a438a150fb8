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
 * How large one text may grow before a batch that must not be cut (a
 * transaction's last writes) is sent in parts: a quarter of MariaDB's default
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
 * The statements in order, cut into texts of at most `maxBytes` each (a
 * statement larger than that alone goes as a text of its own): the producers
 * chunk their rows, so one statement stays well under the server's limit.
 */
export function partsBySize(statements: readonly Statement[], maxBytes = BATCH_TEXT_BYTES): Statement[][] {
  const parts: Statement[][] = []
  let part: Statement[] = []
  let bytes = 0
  for (const st of statements) {
    const size = statementBytes(st)
    if (part.length > 0 && bytes + size > maxBytes) {
      parts.push(part)
      part = []
      bytes = 0
    }
    part.push(st)
    bytes += size
  }
  if (part.length > 0) parts.push(part)
  return parts
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
