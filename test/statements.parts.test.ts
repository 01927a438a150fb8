/** How a batch that must not be cut is sent in parts: by size, in order, none left out. */
import { expect, it } from 'vitest'
import { chunkRows } from '../sql/json.ts'
import {
  BATCH_TEXT_BYTES,
  cutBySize,
  partsBySize,
  type Statement,
  statementBytes,
} from '../sql/statements.ts'

const st = (sql: string, ...params: Statement['params']): Statement => ({ sql, params })

it('keeps the statements in order, each part within the limit unless one statement alone is larger', () => {
  const small = st('UPDATE t SET a = ? WHERE id = ?', 'x'.repeat(100), 1)
  const large = st('INSERT INTO t (a) VALUES (?)', 'y'.repeat(600))
  const list = [small, small, large, small, small, small]
  const limit = 3 * statementBytes(small)
  const parts = partsBySize(list, limit)
  expect(parts.flat()).toEqual(list)
  expect(parts.map((p) => p.length)).toEqual([2, 1, 3])
  for (const part of parts)
    if (part.length > 1) expect(part.reduce((n, s) => n + statementBytes(s), 0)).toBeLessThanOrEqual(limit)
  expect(partsBySize([])).toEqual([])
  expect(partsBySize(list)).toEqual([list])
})

it('counts a value at its escaped worst case: two bytes for each byte of text, multi-byte text by its bytes', () => {
  expect(statementBytes(st('?', 'é'))).toBe(Buffer.byteLength('?') + 2 + 2 * 2 + 2)
  const quotes = "'".repeat(BATCH_TEXT_BYTES / 4)
  expect(statementBytes(st('?', quotes))).toBeGreaterThan(BATCH_TEXT_BYTES / 2)
  expect(partsBySize([st('?', quotes), st('?', quotes)])).toHaveLength(2)
})

it("cuts a multi-row statement's rows at 2,000 rows or at the text budget, whichever comes first", () => {
  const rows = Array.from({ length: 4500 }, (_, i) => i)
  expect(chunkRows(rows, () => 10).map((c) => c.length)).toEqual([2000, 2000, 500])
  // Each row counted with 64 bytes of its statement's own: a megabyte of values a row, four to a chunk.
  const big = (BATCH_TEXT_BYTES - 4 * 64) / 4
  expect(chunkRows([1, 2, 3, 4, 5, 6, 7, 8, 9], () => big).map((c) => c.length)).toEqual([4, 4, 1])
  // A row over the budget alone still goes, in a chunk of its own.
  expect(chunkRows([1, 2, 3], (r) => (r === 2 ? 2 * BATCH_TEXT_BYTES : 1))).toEqual([[1], [2], [3]])
  expect(cutBySize([], () => 1, 10)).toEqual([])
})
