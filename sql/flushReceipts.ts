/**
 * Receipts of the runner's flushes (migration 0032): each flush of step
 * outcomes that writes log lines writes one row, in its own transaction,
 * naming it.
 *
 * A flush is sent again while the database cannot be reached, and a COMMIT
 * whose answer was lost may have been kept. Its guarded moves match nothing
 * the second time, but its log lines are plain INSERTs and would be written
 * twice. So a flush sent again first asks for its receipt: found, the first
 * sending was kept and there is nothing to send. Only a flush sent again
 * reads; the receipt costs each flush with lines one short row in its own
 * text (a flush without lines is all guarded moves, safe to send again).
 */
import { randomBytes } from 'node:crypto'
import type { Queryable } from './db.ts'
import type { CountedStatement } from './statements.ts'

/** Names one flush: when it was first sent (to the millisecond) and 16 random bytes. */
export interface FlushReceipt {
  readonly writtenAt: Date
  readonly token: Buffer
}

export function newFlushReceipt(now = new Date()): FlushReceipt {
  return { writtenAt: now, token: randomBytes(16) }
}

/** The statement a flush's transaction writes its receipt with (first, so it holds nothing long). */
export function writeReceiptStatement(receipt: FlushReceipt): CountedStatement {
  return {
    sql: 'INSERT INTO flush_receipts (written_at, token) VALUES (?, ?)',
    params: [receipt.writtenAt, receipt.token],
    affects: 1,
    rowsOf: 'flush receipts',
  }
}

/** Whether the flush that wrote `receipt` was kept. */
export async function wasKept(db: Pick<Queryable, 'query'>, receipt: FlushReceipt): Promise<boolean> {
  const rows = await db.query('SELECT 1 AS kept FROM flush_receipts WHERE written_at = ? AND token = ?', [
    receipt.writtenAt,
    receipt.token,
  ])
  return rows.length > 0
}

/**
 * Delete at most `limit` receipts written more than `seconds` ago by the
 * database's clock, oldest first (a range of the key); answers how many went.
 */
export async function deleteOlderThan(db: Queryable, seconds: number, limit: number): Promise<number> {
  const res = await db.run(
    `DELETE FROM flush_receipts WHERE written_at < NOW(3) - INTERVAL ? SECOND
      ORDER BY written_at LIMIT ${Math.max(1, Math.trunc(limit))}`,
    [seconds],
  )
  return res.affectedRows
}
