/**
 * One throwaway database per test file: created with a random suffix, migrated,
 * and dropped afterwards (kept when KEEP_TEST_DB=1, for inspection).
 */
import { randomBytes } from 'node:crypto'
import mysql from 'mysql2/promise'
import { afterAll, beforeAll } from 'vitest'
import {
  createDb,
  DatabaseError,
  type Db,
  type DbOptions,
  type Queryable,
  type SqlValue,
} from '../../sql/db.ts'
import { migrate } from '../../sql/migrate.ts'

/** The server tests run against; each file creates its own database on it. */
export function testServerUrl(): string {
  return process.env.TEST_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306'
}

export interface TestDb {
  /** A pool on the throwaway database. */
  db: Db
  /** A URL naming the throwaway database, for servers and child processes. */
  url: string
  name: string
  /** Open another pool on the same database (another "instance"). */
  open(opts?: DbOptions): Db
  /** Close every pool opened here and drop the database. */
  drop(): Promise<void>
}

export async function createTestDb(opts: { migrate?: boolean; pool?: DbOptions } = {}): Promise<TestDb> {
  const server = new URL(testServerUrl())
  const name = `showrunner_test_${randomBytes(5).toString('hex')}`
  const admin = await mysql.createConnection({ uri: server.toString() })
  await admin.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`)
  await admin.end()
  const url = new URL(server.toString())
  url.pathname = `/${name}`
  const pools: Db[] = []
  const open = (o?: DbOptions) => {
    const d = createDb(url.toString(), o ?? opts.pool)
    pools.push(d)
    return d
  }
  const db = open()
  if (opts.migrate !== false) await migrate(db)
  return {
    db,
    url: url.toString(),
    name,
    open,
    async drop() {
      await Promise.allSettled(pools.map((p) => p.close()))
      if (process.env.KEEP_TEST_DB === '1') return
      const c = await mysql.createConnection({ uri: server.toString() })
      await c.query(`DROP DATABASE IF EXISTS \`${name}\``)
      await c.end()
    },
  }
}

/**
 * The file's throwaway database as suite hooks: created in `beforeAll`, dropped in
 * `afterAll`. Call it at the top level of a test file; the answer stands for the
 * database once `beforeAll` has run (reading it earlier throws). `ready` runs
 * right after creation, e.g. to keep the pool in a variable of the file.
 */
export function useTestDb(
  opts: Parameters<typeof createTestDb>[0] & { ready?: (t: TestDb) => void } = {},
): TestDb {
  const { ready, ...createOpts } = opts
  let current: TestDb | undefined
  const get = (): TestDb => {
    if (!current) throw new Error('useTestDb: the test database exists only once beforeAll has run')
    return current
  }
  beforeAll(async () => {
    current = await createTestDb(createOpts)
    ready?.(current)
  })
  afterAll(async () => {
    await current?.drop()
  })
  return {
    get db() {
      return get().db
    },
    get url() {
      return get().url
    },
    get name() {
      return get().name
    },
    open: (o) => get().open(o),
    drop: () => get().drop(),
  }
}

/** A statement method of {@link Queryable}, loosely typed for wrapping. */
type Statement = (sql: string, params?: readonly SqlValue[]) => Promise<unknown>

/**
 * `db` with one statement method wrapped, for injecting a fault into the real
 * database: `wrap` gets the real method (bound to `db`) and answers the one to
 * use instead. Every other member is the real one, so the statements still run
 * against MariaDB. Wrapping `runQuery` wraps the statements of `commitAll` too.
 */
export function wrapStatements<D extends Queryable>(
  db: D,
  method: 'execute' | 'run' | 'query' | 'runQuery',
  wrap: (real: Statement) => Statement,
): D {
  const replaced = wrap((db[method] as Statement).bind(db))
  // A pool's one-text transactions (Db.commitAll) are text-protocol statements
  // too: each goes through the wrapper first, in order, as if sent alone; a
  // fault it throws fails the transaction before any of it is sent.
  const gate = method === 'runQuery' ? wrap(async () => ({ affectedRows: 0, insertId: 0 })) : null
  const commitAll =
    gate && 'commitAll' in db
      ? async (statements: readonly { sql: string; params: readonly SqlValue[] }[], opts?: unknown) => {
          for (const st of statements) await gate(st.sql, st.params)
          return (db as unknown as Db).commitAll(statements, opts as Parameters<Db['commitAll']>[1])
        }
      : null
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === method) return replaced
      if (prop === 'commitAll' && commitAll) return commitAll
      const value = Reflect.get(target, prop, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

/**
 * `db` whose transactions hand `fn` a connection with one statement method
 * wrapped (see {@link wrapStatements}): for injecting a fault between two
 * statements of one transaction and checking that nothing of it is left.
 */
export function wrapTransactionStatements(
  db: Db,
  method: 'execute' | 'run' | 'query' | 'runQuery',
  wrap: (real: Statement) => Statement,
): Db {
  const transaction: Db['transaction'] = (fn, opts) =>
    db.transaction((tx) => fn(wrapStatements(tx, method, wrap)), opts)
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'transaction') return transaction
      const value = Reflect.get(target, prop, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

/** A statement a pool sent, its whitespace folded. */
export interface SentStatement {
  sql: string
  params: unknown[]
}

/** `db` with every statement it sends outside a transaction recorded in `sent`, in order. */
export function recordStatements(db: Db): { db: Db; sent: SentStatement[] } {
  const sent: SentStatement[] = []
  let wrapped = db
  for (const method of ['execute', 'run', 'query', 'runQuery'] as const)
    wrapped = wrapStatements(wrapped, method, (real) => (sql, params) => {
      sent.push({ sql: sql.replace(/\s+/g, ' '), params: [...(params ?? [])] })
      return real(sql, params)
    })
  return { db: wrapped, sent }
}

/** The error a pool's statement throws when its connection dropped before the answer came (it may have run). */
export function connectionLostError(): DatabaseError {
  return new DatabaseError(
    'The database is unavailable (PROTOCOL_CONNECTION_LOST).',
    Object.assign(new Error('Connection lost: The server closed the connection.'), {
      code: 'PROTOCOL_CONNECTION_LOST',
      fatal: true,
    }),
  )
}
