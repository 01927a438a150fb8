/**
 * sql/json.ts idSet against a real MariaDB: the condition it writes (ranges for
 * runs of consecutive ids, an IN list for the rest) selects exactly the ids it
 * was given, whatever their order, gaps or repeats.
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { idSet } from '../sql/json.ts'
import { useTestDb } from './helpers/db.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })

const selected = async (ids: number[]): Promise<number[]> => {
  const which = idSet('id', ids)
  const rows = await db.query<{ id: number }>(
    `SELECT id FROM numbers WHERE ${which.sql} ORDER BY id`,
    which.args,
  )
  return rows.map((r) => Number(r.id))
}

it('selects exactly the given ids: ranges, loose ids, both, unsorted, repeated', async () => {
  await db.query('CREATE TABLE numbers (id BIGINT UNSIGNED PRIMARY KEY)')
  await db.query(
    `INSERT INTO numbers (id) VALUES ${Array.from({ length: 300 }, (_, i) => `(${i + 1})`).join(', ')}`,
  )
  const cases: number[][] = [
    [7],
    [3, 4],
    [10, 11, 12, 13],
    [1, 2, 3, 4, 5, 9, 20, 21, 22, 23, 24, 25, 100],
    [50, 40, 41, 42, 43, 44, 45, 60, 41],
    Array.from({ length: 250 }, (_, i) => 300 - i).filter((n) => n % 37 !== 0),
  ]
  // A random one, each id in with probability 1/2 (runs and gaps of every length).
  let seed = 7
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed / 2 ** 31
  }
  cases.push(Array.from({ length: 300 }, (_, i) => i + 1).filter(() => random() < 0.5))
  for (const ids of cases) expect(await selected(ids)).toEqual([...new Set(ids)].sort((a, b) => a - b))
})

it('writes a run of consecutive ids as one range and leaves short runs in the IN list', () => {
  expect(idSet('id', [5, 1, 2, 3, 4])).toEqual({ sql: 'id BETWEEN ? AND ?', args: [1, 5] })
  expect(idSet('id', [9, 1, 2])).toEqual({ sql: 'id IN (?, ?, ?)', args: [1, 2, 9] })
  expect(idSet('r.id', [1, 2, 3, 4, 8, 20, 21, 22, 23, 24])).toEqual({
    sql: '(r.id BETWEEN ? AND ? OR r.id BETWEEN ? AND ? OR r.id IN (?))',
    args: [1, 4, 20, 24, 8],
  })
})
