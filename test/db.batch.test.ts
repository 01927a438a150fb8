/**
 * Several statements in one round trip: `Queryable.batch` (each answer in
 * order, values escaped by the driver, a failure stopping the rest) and a
 * transaction's `commitWith` (its last writes and the COMMIT together:
 * committed when it answers, rolled back whole when a statement of it fails,
 * retried whole when it loses a deadlock).
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb()
let other: Db

beforeAll(async () => {
  await t.db.run('CREATE TABLE batch_probe (id INT PRIMARY KEY, note VARCHAR(200) NOT NULL)')
  other = t.open()
})
afterAll(async () => {
  await other?.close()
})

const notes = async (db: Db = other) =>
  (await db.query<{ id: number; note: string }>('SELECT id, note FROM batch_probe ORDER BY id')).map(
    (r) => `${r.id}:${r.note}`,
  )

it('answers each statement in order, in one round trip, its values escaped', async () => {
  const before = { ...t.db.stats }
  const hostile = "it's'; DELETE FROM batch_probe; -- ?"
  const answers = await t.db.batch([
    { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?), (?, ?)', params: [1, 'one', 2, hostile] },
    { sql: 'UPDATE batch_probe SET note = ? WHERE id = ?', params: ['uno', 1] },
    { sql: 'SELECT id, note FROM batch_probe WHERE id IN (?, ?) ORDER BY id', params: [1, 2] },
  ])
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(1)
  expect(t.db.stats.statements - before.statements).toBe(3)
  expect(answers.map((a) => a.affectedRows)).toEqual([2, 1, 0])
  expect(answers[2]?.rows.map((r) => r.note)).toEqual(['uno', hostile])
  expect(await notes()).toEqual(['1:uno', `2:${hostile}`])
  // A lone statement is answered as a list of one.
  const [one] = await t.db.batch([{ sql: 'SELECT COUNT(*) AS n FROM batch_probe', params: [] }])
  expect(Number(one?.rows[0]?.n)).toBe(2)
  expect(await t.db.batch([])).toEqual([])
})

it('stops at a failing statement: outside a transaction what ran before it is kept, nothing after it runs', async () => {
  await expect(
    t.db.batch([
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [3, 'three'] },
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [1, 'a duplicate key'] },
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [4, 'four'] },
    ]),
  ).rejects.toMatchObject({ name: 'DatabaseError' })
  expect(await notes()).toContain('3:three')
  expect(await notes()).not.toContain('4:four')
})

it('commitWith sends the last writes with the COMMIT: committed when it answers, in one round trip with the BEGIN', async () => {
  const before = { ...t.db.stats }
  let seenInside: string[] = []
  const answers = await t.db.transaction(async (tx) => {
    const written = await tx.commitWith([
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [10, 'ten'] },
      { sql: 'UPDATE batch_probe SET note = ? WHERE id = ?', params: ['trois', 3] },
    ])
    // Committed already: another connection sees it before the function returns.
    seenInside = await notes()
    return written
  })
  expect(answers.map((a) => a.affectedRows)).toEqual([1, 1])
  expect(seenInside).toContain('10:ten')
  expect(seenInside).toContain('3:trois')
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(1)
})

it('a failing statement of commitWith rolls the whole transaction back, the COMMIT never runs', async () => {
  await expect(
    t.db.transaction(async (tx) => {
      await tx.run('INSERT INTO batch_probe (id, note) VALUES (?, ?)', [20, 'twenty'])
      await tx.commitWith([
        { sql: 'UPDATE batch_probe SET note = ? WHERE id = ?', params: ['changed', 1] },
        { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [2, 'a duplicate key'] },
      ])
    }),
  ).rejects.toMatchObject({ name: 'DatabaseError' })
  const now = await notes()
  expect(now).not.toContain('20:twenty')
  expect(now).toContain('1:uno')
  // commitWith is the transaction's last statement: a second one is a bug, refused.
  await expect(
    t.db.transaction(async (tx) => {
      await tx.commitWith([])
      await tx.commitWith([])
    }),
  ).rejects.toThrow(/last statement/)
})

it('a retryable transaction whose commitWith loses a lock wait is rolled back, run again whole and commits once', async () => {
  await t.db.batch([
    { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?), (?, ?)', params: [30, 'a', 31, 'b'] },
  ])
  const rival = await other.pool.getConnection()
  let attempts = 0
  try {
    await rival.query('START TRANSACTION')
    await rival.query("UPDATE batch_probe SET note = CONCAT(note, '+') WHERE id = 31")
    await t.db.transaction(
      async (tx) => {
        attempts++
        // The first attempt gives up on the rival's row after a second (1205,
        // retried); before the second, the rival commits.
        if (attempts === 1) await tx.run('SET SESSION innodb_lock_wait_timeout = 1')
        else {
          await rival.query('COMMIT')
          await tx.run('SET SESSION innodb_lock_wait_timeout = DEFAULT')
        }
        await tx.run("UPDATE batch_probe SET note = CONCAT(note, '!') WHERE id = 30")
        return tx.commitWith([
          { sql: "UPDATE batch_probe SET note = CONCAT(note, '!') WHERE id = 31", params: [] },
        ])
      },
      { retryable: true },
    )
  } finally {
    await rival.query('ROLLBACK')
    rival.release()
  }
  expect(attempts).toBe(2)
  // The first attempt's write to row 30 went with its rollback: each row has the batch's mark once.
  const rows = await notes()
  expect(rows).toContain('30:a!')
  expect(rows).toContain('31:b+!')
})

it('commitAll: the statements as one transaction, BEGIN and COMMIT in their text, one round trip', async () => {
  const before = { ...t.db.stats }
  const answers = await t.db.commitAll([
    {
      sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?), (?, ?)',
      params: [40, 'forty', 41, 'forty-one'],
    },
    { sql: 'UPDATE batch_probe SET note = ? WHERE id = ?', params: ['XL', 40] },
  ])
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(1)
  expect(answers.map((a) => a.affectedRows)).toEqual([2, 1])
  // Committed once it answers: another connection sees both.
  expect(await notes()).toEqual(expect.arrayContaining(['40:XL', '41:forty-one']))
  expect(await t.db.commitAll([])).toEqual([])
})

it('commitAll keeps nothing when a statement of it fails, the ones before it included', async () => {
  await expect(
    t.db.commitAll([
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [42, 'kept?'] },
      { sql: 'UPDATE batch_probe SET note = ? WHERE id = ?', params: ['changed?', 41] },
      { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [40, 'a duplicate key'] },
    ]),
  ).rejects.toMatchObject({ name: 'DatabaseError' })
  const rows = await notes()
  expect(rows).not.toContain('42:kept?')
  expect(rows).toContain('41:forty-one')
  // The connection went back to the pool with no transaction open: what follows on it commits on its own.
  for (let i = 0; i < 12; i++) await t.db.run('UPDATE batch_probe SET note = ? WHERE id = ?', [`n${i}`, 41])
  expect(await notes()).toContain('41:n11')
})

it('a retryable commitAll that loses a lock wait is rolled back and sent again whole', async () => {
  await t.db.batch([
    { sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?), (?, ?)', params: [50, 'a', 51, 'b'] },
  ])
  const rival = await other.pool.getConnection()
  const before = { ...t.db.stats }
  try {
    await rival.query('START TRANSACTION')
    await rival.query("UPDATE batch_probe SET note = CONCAT(note, '+') WHERE id = 51")
    // The first attempt gives up on the rival's row after a second (1205); the rival commits before the next one waits long.
    const rivalDone = new Promise((r) => setTimeout(r, 1500)).then(() => rival.query('COMMIT'))
    await t.db.commitAll(
      [
        { sql: "UPDATE batch_probe SET note = CONCAT(note, '!') WHERE id = 50", params: [] },
        {
          sql: "SET STATEMENT innodb_lock_wait_timeout = 1 FOR UPDATE batch_probe SET note = CONCAT(note, '!') WHERE id = 51",
          params: [],
        },
      ],
      { retryable: true },
    )
    await rivalDone
  } finally {
    await rival.query('ROLLBACK')
    rival.release()
  }
  expect(t.db.stats.roundTrips - before.roundTrips).toBeGreaterThanOrEqual(2)
  const rows = await notes()
  expect(rows).toContain('50:a!')
  expect(rows).toContain('51:b+!')
})

it('a commitAll past the text limit goes in parts, one transaction: a failure in the last part keeps nothing of the first', async () => {
  await t.db.run('CREATE TABLE batch_blob (id INT PRIMARY KEY, body LONGTEXT NOT NULL)')
  // Each about 3.2 MB as counted (escaping's worst case): one to a part.
  const big = 'x'.repeat(1_600_000)
  const inserts = [1, 2, 3].map((id) => ({
    sql: 'INSERT INTO batch_blob (id, body) VALUES (?, ?)',
    params: [id, big],
  }))
  const before = { ...t.db.stats }
  await expect(
    t.db.commitAll([
      ...inserts,
      { sql: 'INSERT INTO batch_blob (id, body) VALUES (?, ?)', params: [1, 'again'] },
    ]),
  ).rejects.toMatchObject({ name: 'DatabaseError' })
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(3)
  const count = async () =>
    Number((await other.query<{ n: number }>('SELECT COUNT(*) AS n FROM batch_blob'))[0]?.n)
  expect(await count()).toBe(0)
  const sent = { ...t.db.stats }
  const answers = await t.db.commitAll(inserts)
  expect(t.db.stats.roundTrips - sent.roundTrips).toBe(3)
  expect(answers.map((a) => a.affectedRows)).toEqual([1, 1, 1])
  expect(await count()).toBe(3)
})

it("a transaction's BEGIN rides with its first text statement; before a prepared one it goes alone", async () => {
  await t.db.batch([{ sql: 'INSERT INTO batch_probe (id, note) VALUES (?, ?)', params: [60, 'sixty'] }])
  const before = { ...t.db.stats }
  await t.db.transaction(async (tx) => {
    await tx.query('SELECT note FROM batch_probe WHERE id = ? FOR UPDATE', [60])
    await tx.runQuery('UPDATE batch_probe SET note = ? WHERE id = ?', ['LX', 60])
  })
  // The read with its BEGIN, the write, the COMMIT.
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(3)
  const prepared = { ...t.db.stats }
  await t.db.transaction(async (tx) => {
    await tx.execute('SELECT note FROM batch_probe WHERE id = ? FOR UPDATE', [60])
  })
  // BEGIN, the prepared read, the COMMIT.
  expect(t.db.stats.roundTrips - prepared.roundTrips).toBe(3)
  // A transaction that sent nothing sends nothing, not even its COMMIT.
  const empty = { ...t.db.stats }
  expect(await t.db.transaction(async () => 'nothing')).toBe('nothing')
  expect(t.db.stats.roundTrips).toBe(empty.roundTrips)
  expect(await notes()).toContain('60:LX')
})

it('a first statement that fails inside its BEGIN text leaves the transaction open: what follows is in it, and rolled back with it', async () => {
  await expect(
    t.db.transaction(async (tx) => {
      // A duplicate key, caught: the transaction goes on.
      await tx
        .runQuery('INSERT INTO batch_probe (id, note) VALUES (?, ?)', [60, 'a duplicate'])
        .catch(() => null)
      await tx.runQuery('INSERT INTO batch_probe (id, note) VALUES (?, ?)', [61, 'in the transaction'])
      throw new Error('changed my mind')
    }),
  ).rejects.toThrow('changed my mind')
  // Had the second statement begun a transaction of its own, the first's would have been committed and this kept.
  expect(await notes()).not.toContain('61:in the transaction')
})

it('the isolation level asked for rides in the BEGIN text and holds for the transaction', async () => {
  const seen = await t.db.transaction(
    async (tx) => {
      const count = async () =>
        Number((await tx.query<{ n: number }>('SELECT COUNT(*) AS n FROM batch_probe'))[0]?.n)
      const first = await count()
      await other.run('INSERT INTO batch_probe (id, note) VALUES (?, ?)', [62, 'committed meanwhile'])
      return { first, second: await count() }
    },
    { isolation: 'READ COMMITTED' },
  )
  // Under REPEATABLE READ (the default) the second read would see the first's snapshot.
  expect(seen.second).toBe(seen.first + 1)
  const repeatable = await t.db.transaction(async (tx) => {
    const count = async () =>
      Number((await tx.query<{ n: number }>('SELECT COUNT(*) AS n FROM batch_probe'))[0]?.n)
    const first = await count()
    await other.run('INSERT INTO batch_probe (id, note) VALUES (?, ?)', [63, 'not seen'])
    return { first, second: await count() }
  })
  expect(repeatable.second).toBe(repeatable.first)
})
