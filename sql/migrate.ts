/**
 * The migrator: applies `sql/migrations/NNNN_name.sql` in order, records each in
 * `schema_migrations`, and is a no-op when the database is current.
 *
 * Several instances may start at once on a fresh database. They serialise on a
 * MariaDB named lock (GET_LOCK), held on one connection for the whole run, so the
 * second migrator waits, then finds every file recorded and does nothing. Files
 * are never edited after they land: a recorded file whose checksum changed is
 * reported rather than silently skipped.
 */
import { createHash } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { PoolConnection, RowDataPacket } from 'mysql2/promise'
import { DatabaseError, DB_ERRNO, type Db, isDbErrno } from './db.ts'

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations')
const LOCK_NAME = 'showrunner.migrate'

export interface Migration {
  name: string
  checksum: string
  statements: string[]
}

/** Statements are separated by a line holding only `;;`, so bodies may contain `;`. */
export function splitStatements(text: string): string[] {
  return text
    .split(/^\s*;;\s*$/m)
    .map((s) =>
      s
        .split('\n')
        .filter((line) => !/^\s*--/.test(line))
        .join('\n')
        .trim(),
    )
    .filter((s) => s.length > 0)
}

/** The names of the migration files, in order (no reading or hashing). */
async function migrationNames(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort()
}

/** Every migration file, in order. */
export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = await migrationNames(dir)
  return Promise.all(
    files.map(async (name) => {
      const text = await readFile(join(dir, name), 'utf8')
      return {
        name,
        checksum: createHash('sha256').update(text).digest('hex'),
        statements: splitStatements(text),
      }
    }),
  )
}

export interface MigrateResult {
  /** Files applied by this call, in order. */
  applied: string[]
  /** Files already recorded before this call. */
  current: string[]
}

async function ensureTable(conn: PoolConnection): Promise<void> {
  await conn.query(
    `CREATE TABLE IF NOT EXISTS schema_migrations (
       name       VARCHAR(255) NOT NULL,
       checksum   CHAR(64)     NOT NULL,
       applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
       PRIMARY KEY (name)
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
  )
}

async function recorded(conn: PoolConnection): Promise<Map<string, string>> {
  const [rows] = await conn.query<RowDataPacket[]>('SELECT name, checksum FROM schema_migrations')
  return new Map(rows.map((r) => [String(r.name), String(r.checksum)]))
}

/**
 * Apply every pending migration.
 *
 * @param lockTimeoutSeconds how long to wait for a concurrent migrator. @default 60
 */
export async function migrate(
  db: Db,
  { lockTimeoutSeconds = 60, dir = MIGRATIONS_DIR } = {},
): Promise<MigrateResult> {
  const migrations = await loadMigrations(dir)
  let conn: PoolConnection
  try {
    conn = await db.pool.getConnection()
  } catch (err) {
    throw new DatabaseError(
      'Cannot migrate: the database is unavailable. Check that MariaDB is running and DATABASE_URL is right.',
      err,
    )
  }
  try {
    const [[lock]] = await conn.query<RowDataPacket[]>('SELECT GET_LOCK(?, ?) AS got', [
      LOCK_NAME,
      lockTimeoutSeconds,
    ])
    if (Number(lock?.got) !== 1) {
      throw new Error(
        `Another migrator has held the migration lock for ${lockTimeoutSeconds}s; check for a stuck showrunner process, then retry.`,
      )
    }
    try {
      await ensureTable(conn)
      const done = await recorded(conn)
      const applied: string[] = []
      const current: string[] = []
      for (const m of migrations) {
        const known = done.get(m.name)
        if (known !== undefined) {
          if (known !== m.checksum) {
            throw new Error(
              `Migration ${m.name} changed after it was applied; migrations must never be edited. Add a new numbered file instead.`,
            )
          }
          current.push(m.name)
          continue
        }
        for (const statement of m.statements) {
          try {
            await conn.query(statement)
          } catch (err) {
            throw new DatabaseError(
              `Migration ${m.name} failed; fix the file or the database and run it again.`,
              err,
            )
          }
        }
        await conn.query('INSERT INTO schema_migrations (name, checksum) VALUES (?, ?)', [m.name, m.checksum])
        applied.push(m.name)
      }
      return { applied, current }
    } finally {
      await conn.query('SELECT RELEASE_LOCK(?)', [LOCK_NAME])
    }
  } finally {
    conn.release()
  }
}

/** Names of migration files not yet applied (for /readyz). */
export async function pendingMigrations(db: Db, dir = MIGRATIONS_DIR): Promise<string[]> {
  // /readyz asks this on every probe: names are enough, no need to read and hash the files.
  const names = await migrationNames(dir)
  let rows: { name: string }[]
  try {
    rows = await db.query<{ name: string }>('SELECT name FROM schema_migrations')
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.NO_SUCH_TABLE)) return names
    throw err
  }
  const done = new Set(rows.map((r) => r.name))
  return names.filter((name) => !done.has(name))
}
