/**
 * What sql/db.ts does for a cluster, checked on the single test server: a URL
 * naming several hosts, moving to the next host when one does not answer, the
 * Galera refusals counted as unavailability, and transactions that are safe to
 * repeat run again after a lock wait timeout.
 */
import { describe, expect, it } from 'vitest'
import {
  createDb,
  DatabaseError,
  DB_ERRNO,
  type Db,
  isDbErrno,
  isDbUnavailable,
  parseDatabaseUrl,
  redactDatabaseUrl,
} from '../sql/db.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb({ migrate: false })

/** The test database's URL with a host that refuses connections listed first. */
function urlWithDeadHostFirst(): string {
  const u = new URL(t.url)
  // Port 1 on loopback: nothing listens there, so the connection is refused at once.
  return t.url.replace(`@${u.host}`, `@127.0.0.1:1,${u.host}`)
}

describe('parseDatabaseUrl', () => {
  it('reads one host, several hosts, defaults and encoded credentials', () => {
    expect(parseDatabaseUrl('mysql://u:p%40ss@db.example:3307/app')).toEqual({
      hosts: [{ host: 'db.example', port: 3307 }],
      socketPath: undefined,
      user: 'u',
      password: 'p@ss',
      database: 'app',
    })
    const many = parseDatabaseUrl('mysql://root@127.0.0.1:3311,127.0.0.1:3312,node3/showrunner')
    expect(many.hosts).toEqual([
      { host: '127.0.0.1', port: 3311 },
      { host: '127.0.0.1', port: 3312 },
      { host: 'node3', port: 3306 },
    ])
    expect(many.database).toBe('showrunner')
    expect(parseDatabaseUrl('mysql://localhost?socket=/run/mysqld/mysqld.sock').hosts).toEqual([])
  })

  it('redacts the password of a multi-host URL', () => {
    expect(redactDatabaseUrl('mysql://u:secret@h1:1,h2:2/db?x=1')).toBe('mysql://u:***@h1:1,h2:2/db?x=1')
    expect(redactDatabaseUrl('mysql://u@h1/db')).toBe('mysql://u@h1/db')
  })
})

describe('unavailability', () => {
  it('counts a Galera node refusing work, a failed COMMIT and a killed connection as unavailable', () => {
    for (const errno of [
      DB_ERRNO.WSREP_NOT_READY,
      DB_ERRNO.ERROR_DURING_COMMIT,
      DB_ERRNO.CONNECTION_KILLED,
    ]) {
      expect(isDbUnavailable(new DatabaseError('x', { errno, code: 'ER_X' }))).toBe(true)
    }
    expect(isDbUnavailable(new DatabaseError('x', { errno: DB_ERRNO.DUP_ENTRY, code: 'ER_DUP_ENTRY' }))).toBe(
      false,
    )
  })
})

describe('a URL naming several hosts', () => {
  it('moves to the next host when the first refuses connections, for statements and transactions', async () => {
    const db = createDb(urlWithDeadHostFirst(), { connectionLimit: 2, connectTimeout: 1000 })
    try {
      const [row] = await db.query<{ one: number }>('SELECT 1 AS one')
      expect(Number(row?.one)).toBe(1)
      // A transaction whose connection could not be opened goes to the next host too.
      const again = createDb(urlWithDeadHostFirst(), { connectionLimit: 2, connectTimeout: 1000 })
      try {
        const n = await again.transaction(async (tx) => {
          const [r] = await tx.query<{ n: number }>('SELECT 2 AS n')
          return Number(r?.n)
        })
        expect(n).toBe(2)
        expect(await again.ping()).toBe(true)
      } finally {
        await again.close()
      }
    } finally {
      await db.close()
    }
  })

  it('reports unavailability when no host answers', async () => {
    const db = createDb('mysql://root@127.0.0.1:1,127.0.0.1:2/nowhere', { connectTimeout: 500 })
    try {
      const err = await db.query('SELECT 1').catch((e: unknown) => e)
      expect(isDbUnavailable(err)).toBe(true)
      expect((err as Error).message).not.toContain('SELECT')
    } finally {
      await db.close()
    }
  })
})

describe('a transaction that is safe to repeat', () => {
  /**
   * Another connection holds row 1 for `holdMs`; the transaction under test
   * updates it with a 1 s lock wait timeout. Answers how many times its body
   * ran and how it ended.
   */
  /**
   * A transaction (its lock wait timeout 1 s) against a row another
   * connection holds. The holder lets go when the transaction runs a second
   * time (retryable) or once it has settled (not): no timer decides it, so a
   * loaded machine that starts the transaction late cannot let it through.
   */
  async function againstHeldRow(db: Db, retryable: boolean) {
    await t.db.query('CREATE TABLE IF NOT EXISTS held_row (id INT PRIMARY KEY, n INT NOT NULL)')
    await t.db.query('REPLACE INTO held_row VALUES (1, 0)')
    const holder = await t.db.pool.getConnection()
    await holder.beginTransaction()
    await holder.query('UPDATE held_row SET n = n + 100 WHERE id = 1')
    let released: Promise<void> | null = null
    const release = () => {
      released ??= holder
        .commit()
        .finally(() => holder.release())
        .then(
          () => undefined,
          () => undefined,
        )
      return released
    }
    let calls = 0
    const outcome = await db
      .transaction(
        async (tx) => {
          calls++
          if (calls === 2) void release()
          await tx.query('SET SESSION innodb_lock_wait_timeout = 1')
          await tx.query('UPDATE held_row SET n = n + 1 WHERE id = 1')
          return 'done'
        },
        { retryable },
      )
      .then(
        (v) => ({ ok: true as const, v }),
        (err: unknown) => ({ ok: false as const, err }),
      )
    await release()
    return { calls, outcome }
  }

  it('runs again after a lock wait timeout (1205) and commits', async () => {
    const db = t.open({ connectionLimit: 2 })
    const { calls, outcome } = await againstHeldRow(db, true)
    expect(outcome.ok).toBe(true)
    expect(calls).toBeGreaterThan(1)
    const [row] = await t.db.query<{ n: number }>('SELECT n FROM held_row WHERE id = 1')
    expect(Number(row?.n)).toBe(101)
  })

  it('leaves a lock wait timeout to the caller when not marked safe to repeat', async () => {
    const db = t.open({ connectionLimit: 2 })
    const { calls, outcome } = await againstHeldRow(db, false)
    expect(calls).toBe(1)
    expect(outcome.ok).toBe(false)
    expect(isDbErrno(outcome.ok ? null : outcome.err, DB_ERRNO.LOCK_WAIT_TIMEOUT)).toBe(true)
  })
})
