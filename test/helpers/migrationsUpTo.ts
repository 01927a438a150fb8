/**
 * A database held at an earlier migration, for a test of the migrations that
 * came after it: the file's throwaway database left unmigrated
 * ({@link useTestDb}), and a folder holding the project's migration files up
 * to `last` (a number such as '0018'), for `migrate(t.db, { dir })`, made in
 * `beforeAll` and removed in `afterAll`.
 */
import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll } from 'vitest'
import type { Queryable } from '../../sql/db.ts'
import { loadMigrations, MIGRATIONS_DIR } from '../../sql/migrate.ts'
import { type TestDb, useTestDb } from './db.ts'

export interface HeldAtMigration {
  t: TestDb
  /** The migration files up to `last` (once beforeAll has run). */
  readonly dir: string
}

export function useDatabaseUpTo(last: string): HeldAtMigration {
  const t = useTestDb({ migrate: false })
  let dir: string | undefined
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), `sr-mig${last}-`))
    for (const f of await readdir(MIGRATIONS_DIR))
      if (f <= `${last}_~`) await copyFile(join(MIGRATIONS_DIR, f), join(dir, f))
  })
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true })
  })
  return {
    t,
    get dir() {
      if (!dir) throw new Error('useDatabaseUpTo: the folder exists only once beforeAll has run')
      return dir
    },
  }
}

/** A table's index names, sorted: what a migration test compares before and after. */
export async function indexNames(db: Queryable, table: string): Promise<string[]> {
  const rows = await db.query<{ INDEX_NAME: string }>(
    `SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS
      WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
    [table],
  )
  return rows.map((r) => r.INDEX_NAME).sort()
}

/**
 * Every statement of the named migration files, sent again: a migrator killed
 * halfway repeats its file, so each must run a second time without error.
 */
export async function runFilesAgain(db: Queryable, names: readonly string[]): Promise<void> {
  for (const m of (await loadMigrations()).filter((x) => names.includes(x.name)))
    for (const sql of m.statements) await db.run(sql)
}
