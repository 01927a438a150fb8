/**
 * The migrator: applies `sql/migrations/NNNN_name.sql` in order, records each in
 * `schema_migrations`, and is a no-op when the database is current.
 *
 * Several instances may start at once on a fresh database, on one server or on
 * different nodes of a Galera cluster. They serialise on a lock row
 * (`schema_migrations_lock`): taking it is an INSERT, a write every node sees,
 * where a session lock (GET_LOCK) or a row lock would hold only on the node that
 * took it. The others wait, then find every file recorded and do nothing. A
 * migrator that dies holding the row leaves it to expire. Files are never
 * edited after they land: a recorded file whose checksum changed is reported
 * rather than silently skipped.
 */
import { createHash, randomBytes } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DatabaseError, DB_ERRNO, type Db, isDbErrno } from './db.ts'

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations')
/**
 * How long the lock row stays valid without a sign of life; its holder renews
 * it after each file, so this bounds one file's run and how long a dead
 * migrator blocks the others.
 */
const LOCK_TTL_SECONDS = 300

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

async function ensureTables(db: Db): Promise<void> {
  await db.query(
    `CREATE TABLE IF NOT EXISTS schema_migrations (
       name       VARCHAR(255) NOT NULL,
       checksum   CHAR(64)     NOT NULL,
       applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
       PRIMARY KEY (name)
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
  )
  await db.query(
    `CREATE TABLE IF NOT EXISTS schema_migrations_lock (
       id         TINYINT UNSIGNED NOT NULL,
       holder     VARCHAR(64)      NOT NULL,
       expires_at DATETIME(3)      NOT NULL,
       PRIMARY KEY (id)
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
  )
}

async function recorded(db: Db): Promise<Map<string, string>> {
  const rows = await db.query<{ name: string; checksum: string }>(
    'SELECT name, checksum FROM schema_migrations',
  )
  return new Map(rows.map((r) => [String(r.name), String(r.checksum)]))
}

/** Files recorded with the same checksum, or throws when one was edited; the rest are pending. */
function split(
  migrations: Migration[],
  done: Map<string, string>,
): { current: string[]; pending: Migration[] } {
  const current: string[] = []
  const pending: Migration[] = []
  for (const m of migrations) {
    const known = done.get(m.name)
    if (known === undefined) {
      pending.push(m)
      continue
    }
    if (known !== m.checksum) {
      throw new Error(
        `Migration ${m.name} changed after it was applied; migrations must never be edited. Add a new numbered file instead.`,
      )
    }
    current.push(m.name)
  }
  return { current, pending }
}

/**
 * Take the lock row, waiting up to `timeoutSeconds` for another migrator. Each
 * attempt is one autocommit statement, so its answer stands only once the write
 * committed (on Galera, a concurrent INSERT from another node loses
 * certification and, retried, meets the duplicate key).
 */
async function acquireLock(db: Db, holder: string, timeoutSeconds: number): Promise<void> {
  const deadline = Date.now() + timeoutSeconds * 1000
  for (;;) {
    try {
      await db.run(
        'INSERT INTO schema_migrations_lock (id, holder, expires_at) VALUES (1, ?, NOW(3) + INTERVAL ? SECOND)',
        [holder, LOCK_TTL_SECONDS],
      )
      return
    } catch (err) {
      if (!isDbErrno(err, DB_ERRNO.DUP_ENTRY)) throw err
    }
    // Held: by a live migrator, or by one that died, whose row has expired.
    const took = await db.run(
      `UPDATE schema_migrations_lock SET holder = ?, expires_at = NOW(3) + INTERVAL ? SECOND
        WHERE id = 1 AND expires_at < NOW(3)`,
      [holder, LOCK_TTL_SECONDS],
    )
    if (took.affectedRows === 1) return
    if (Date.now() >= deadline) {
      throw new Error(
        `Another migrator has held the migration lock for ${timeoutSeconds}s; check for a stuck showrunner process, then retry.`,
      )
    }
    await new Promise((r) => setTimeout(r, 100 + Math.random() * 200))
  }
}

/** Renew the lock row; throws when it is no longer ours (it expired and another migrator took it). */
async function renewLock(db: Db, holder: string): Promise<void> {
  const res = await db.run(
    'UPDATE schema_migrations_lock SET expires_at = NOW(3) + INTERVAL ? SECOND WHERE id = 1 AND holder = ?',
    [LOCK_TTL_SECONDS, holder],
  )
  if (res.affectedRows !== 1) {
    throw new Error('The migration lock expired while a file was applied; run the migration again.')
  }
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
  try {
    await ensureTables(db)
  } catch (err) {
    if (err instanceof DatabaseError && err.unavailable) {
      throw new DatabaseError(
        'Cannot migrate: the database is unavailable. Check that MariaDB is running and DATABASE_URL is right.',
        err,
      )
    }
    throw err
  }
  // Already current (every restart): no lock needed.
  const before = split(migrations, await recorded(db))
  if (before.pending.length === 0) return { applied: [], current: before.current }

  const holder = randomBytes(12).toString('hex')
  await acquireLock(db, holder, lockTimeoutSeconds)
  try {
    // Read again under the lock: another migrator may have applied them meanwhile.
    const { current, pending } = split(migrations, await recorded(db))
    const applied: string[] = []
    for (const m of pending) {
      for (const statement of m.statements) {
        try {
          await db.query(statement)
        } catch (err) {
          throw new DatabaseError(
            `Migration ${m.name} failed; fix the file or the database and run it again.`,
            err,
          )
        }
      }
      await db.run('INSERT INTO schema_migrations (name, checksum) VALUES (?, ?)', [m.name, m.checksum])
      applied.push(m.name)
      await renewLock(db, holder)
    }
    return { applied, current }
  } finally {
    await db.run('DELETE FROM schema_migrations_lock WHERE id = 1 AND holder = ?', [holder])
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
