/**
 * `Db.withConnection`: several statements on one pool connection taken once,
 * each its own autocommit. What the inbox's poll relies on: its reads queue
 * for the pool once, not once each, and nothing is held open between them.
 */
import { beforeAll, expect, it } from 'vitest'
import { createDb, type Db } from '../sql/db.ts'
import { useTestDb } from './helpers/db.ts'

let db: Db
const t = useTestDb({ ready: (created) => (db = created.db) })

beforeAll(async () => {
  await db.run('CREATE TABLE scratch (id INT PRIMARY KEY, v INT NOT NULL)')
})

const connectionId = async (q: { query<T>(sql: string): Promise<T[]> }) =>
  Number((await q.query<{ id: number }>('SELECT CONNECTION_ID() AS id'))[0]?.id)

it('runs every statement on one connection, acquired once, each committed as it runs', async () => {
  const own = createDb(t.url, { connectionLimit: 2 })
  let acquisitions = 0
  own.pool.on('acquire', () => acquisitions++)
  try {
    const out = await own.withConnection(async (conn) => {
      const first = await connectionId(conn)
      await conn.run('INSERT INTO scratch (id, v) VALUES (1, 10)')
      // Another connection sees the row before `fn` ends: no transaction holds it.
      const seen = await db.query('SELECT v FROM scratch WHERE id = 1')
      return { first, second: await connectionId(conn), seenByOthers: seen.length }
    })
    expect(out.second).toBe(out.first)
    expect(out.seenByOthers).toBe(1)
    expect(acquisitions).toBe(1)
  } finally {
    await own.close()
  }
})

it('gives the connection back when `fn` fails, and the failure is the caller’s', async () => {
  const own = createDb(t.url, { connectionLimit: 1 })
  try {
    await expect(
      own.withConnection(async (conn) => {
        await conn.query('SELECT nope FROM scratch')
      }),
    ).rejects.toMatchObject({ name: 'DatabaseError' })
    // The only connection is free again: this would wait for ever otherwise.
    expect(await own.withConnection((conn) => connectionId(conn))).toBeGreaterThan(0)
  } finally {
    await own.close()
  }
})
