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

/** What one statement of a batch answered: its rows (a read) or its counts (a write). */
export interface BatchAnswer {
  rows: Row[]
  affectedRows: number
  insertId: number
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
