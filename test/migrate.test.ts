import { afterEach, describe, expect, it } from 'vitest'
import { loadMigrations, migrate, pendingMigrations } from '../sql/migrate.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'

let t: TestDb | undefined
afterEach(async () => {
  await t?.drop()
  t = undefined
})

describe('migrate', () => {
  it('applies every file once, then is a no-op', async () => {
    t = await createTestDb({ migrate: false })
    const all = (await loadMigrations()).map((m) => m.name)
    expect(await pendingMigrations(t.db)).toEqual(all)
    const first = await migrate(t.db)
    expect(first.applied).toEqual(all)
    const second = await migrate(t.db)
    expect(second.applied).toEqual([])
    expect(second.current).toEqual(all)
    expect(await pendingMigrations(t.db)).toEqual([])
    const tables = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = ? AND table_name IN
        ('event_definitions','event_versions','event_runs','event_run_steps','event_run_logs','concurrency_locks','runner_heartbeats','audit_log')`,
      [t.name],
    )
    expect(Number(tables[0]?.n)).toBe(8)
  })

  it('is safe when several migrators start at once on a fresh database', async () => {
    t = await createTestDb({ migrate: false })
    const pools = [t.open(), t.open(), t.open(), t.open()]
    const results = await Promise.all(pools.map((p) => migrate(p)))
    const appliedCounts = results.map((r) => r.applied.length)
    const all = (await loadMigrations()).length
    // Exactly one migrator applied everything; the others found it current.
    expect(appliedCounts.filter((n) => n === all)).toHaveLength(1)
    expect(appliedCounts.filter((n) => n === 0)).toHaveLength(pools.length - 1)
    const rows = await t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM schema_migrations')
    expect(Number(rows[0]?.n)).toBe(all)
  })
})
