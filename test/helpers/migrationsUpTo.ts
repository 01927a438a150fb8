/**
 * A database held at an earlier migration, for a test of the migrations that
 * came after it: a throwaway database left unmigrated, and a folder holding
 * the project's migration files up to `last` (a number such as '0018'), for
 * `migrate(db, { dir })`. Both are dropped by `drop()`.
 */
import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MIGRATIONS_DIR } from '../../sql/migrate.ts'
import { createTestDb, type TestDb } from './db.ts'

export interface HeldAtMigration {
  t: TestDb
  /** The migration files up to `last`. */
  dir: string
  drop(): Promise<void>
}

export async function databaseUpTo(last: string): Promise<HeldAtMigration> {
  const t = await createTestDb({ migrate: false })
  const dir = await mkdtemp(join(tmpdir(), `sr-mig${last}-`))
  for (const f of await readdir(MIGRATIONS_DIR))
    if (f <= `${last}_~`) await copyFile(join(MIGRATIONS_DIR, f), join(dir, f))
  return {
    t,
    dir,
    drop: async () => {
      await t.drop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
