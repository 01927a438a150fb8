/**
 * Statements on one pool connection taken once.
 *
 * `Db.transactionThen`: a transaction, then more statements on the same
 * connection once the commit is through. What a cue's answer relies on: the
 * work after the commit does not queue for the pool again, sees the commit,
 * and a failure there neither repeats the transaction nor undoes it.
 *
 * `Db.withConnection`: several autocommit statements on one connection. What
 * the inbox's poll relies on: its reads queue for the pool once, not once
 * each, and nothing is held open between them.
 */
import { beforeAll, expect, it } from 'vitest'
import { createDb, DB_ERRNO, type Db, isDbErrno } from '../sql/db.ts'
import { useTestDb } from './helpers/db.ts'

let db: Db
const t = useTestDb({ ready: (created) => (db = created.db) })

beforeAll(async () => {
  await db.run('CREATE TABLE scratch (id INT PRIMARY KEY, v INT NOT NULL)')
})

const connectionId = async (q: { query<T>(sql: string): Promise<T[]> }) =>
  Number((await q.query<{ id: number }>('SELECT CONNECTION_ID() AS id'))[0]?.id)

it('runs `then` on the transaction’s own connection, after the commit, with one acquisition in all', async () => {
  const own = createDb(t.url, { connectionLimit: 2 })
  let acquisitions = 0
  own.pool.on('acquire', () => acquisitions++)
  try {
    const out = await own.transactionThen(
      async (tx) => {
        await tx.run('INSERT INTO scratch (id, v) VALUES (1, 10)')
        return { inTx: await connectionId(tx) }
      },
      async (conn, committed) => {
        // Another connection sees the row: the commit is through before `then` begins.
        const seen = await db.query<{ v: number }>('SELECT v FROM scratch WHERE id = 1')
        await conn.run('UPDATE scratch SET v = v + 1 WHERE id = 1')
        return { ...committed, after: await connectionId(conn), seenByOthers: seen.length }
      },
    )
    expect(out.after).toBe(out.inTx)
    expect(out.seenByOthers).toBe(1)
    expect(acquisitions).toBe(1)
    expect((await db.query<{ v: number }>('SELECT v FROM scratch WHERE id = 1'))[0]?.v).toBe(11)
  } finally {
    await own.close()
  }
})

it('a failure after the commit is thrown as it is: the transaction is neither repeated nor undone', async () => {
  let bodies = 0
  const deadlock = Object.assign(new Error('Deadlock found when trying to get lock'), {
    errno: DB_ERRNO.LOCK_DEADLOCK,
  })
  const failed = await db
    .transactionThen(
      async (tx) => {
        bodies++
        await tx.run('INSERT INTO scratch (id, v) VALUES (2, 20)')
      },
      async () => {
        // A conflict inside the transaction would be retried; after its commit it must not be.
        throw deadlock
      },
      { retryable: true },
    )
    .catch((err: unknown) => err)
  expect(failed).toBe(deadlock)
  expect(isDbErrno(failed, DB_ERRNO.LOCK_DEADLOCK)).toBe(true)
  expect(bodies).toBe(1)
  expect((await db.query<{ v: number }>('SELECT v FROM scratch WHERE id = 2'))[0]?.v).toBe(20)
})

it('a conflict inside the transaction is still retried, and `then` runs once, after the attempt that committed', async () => {
  let bodies = 0
  let thens = 0
  await db.transactionThen(
    async (tx) => {
      bodies++
      if (bodies === 1)
        throw Object.assign(new Error('Deadlock found when trying to get lock'), {
          errno: DB_ERRNO.LOCK_DEADLOCK,
        })
      await tx.run('INSERT INTO scratch (id, v) VALUES (3, 30)')
    },
    async () => {
      thens++
    },
    { retryable: true },
  )
  expect(bodies).toBe(2)
  expect(thens).toBe(1)
})

it('runs every statement on one connection, acquired once, each committed as it runs', async () => {
  const own = createDb(t.url, { connectionLimit: 2 })
  let acquisitions = 0
  own.pool.on('acquire', () => acquisitions++)
  try {
    const out = await own.withConnection(async (conn) => {
      const first = await connectionId(conn)
      await conn.run('INSERT INTO scratch (id, v) VALUES (101, 10)')
      // Another connection sees the row before `fn` ends: no transaction holds it.
      const seen = await db.query('SELECT v FROM scratch WHERE id = 101')
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
