/**
 * A database held at an earlier migration, for a test of the migrations that
 * came after it: the file's throwaway database left unmigrated
 * ({@link useTestDb}), and a folder holding the project's migration files up
 * to `last` (a file name such as '0018_claim_token_unindexed.sql'), made in
 * `beforeAll` and removed in `afterAll`; {@link HeldAtMigration.migrateToHeld}
 * brings the database there.
 */
import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, expect } from 'vitest'
import type { Queryable } from '../../sql/db.ts'
import { loadMigrations, MIGRATIONS_DIR, migrate } from '../../sql/migrate.ts'
import { type TestDb, useTestDb } from './db.ts'

export interface HeldAtMigration {
  t: TestDb
  /** The migration files up to `last` (once beforeAll has run). */
  readonly dir: string
  /** Apply the files up to `last` to the database, and check that `last` was the last applied. */
  migrateToHeld(): Promise<void>
}

export function useDatabaseUpTo(last: string): HeldAtMigration {
  const t = useTestDb({ migrate: false })
  let dir: string | undefined
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), `sr-mig${last.split('_')[0]}-`))
    for (const f of await readdir(MIGRATIONS_DIR))
      if (f <= last) await copyFile(join(MIGRATIONS_DIR, f), join(dir, f))
  })
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true })
  })
  const held: HeldAtMigration = {
    t,
    get dir() {
      if (!dir) throw new Error('useDatabaseUpTo: the folder exists only once beforeAll has run')
      return dir
    },
    async migrateToHeld() {
      const result = await migrate(t.db, { dir: held.dir })
      expect(result.applied.at(-1)).toBe(last)
    },
  }
  return held
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
