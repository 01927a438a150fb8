/**
 * Migration 0031 (the degraded count's index and its virtual column go) on a
 * database that was at 0030 and holds degraded runs in every state: it
 * applies, the count answers what the index answered, the column is gone,
 * and it runs again without error. A fresh database is covered by
 * migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { migrate } from '../sql/migrate.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { indexNames, runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = ['0031_degraded_count_without_index.sql']

const held = useDatabaseUpTo('0030_wake_index_without_scheduled.sql')
const t = held.t

describe('from 0030 with data', () => {
  it('applies 0031: the degraded count answers as its index did, and the column is gone', async () => {
    await held.migrateToHeld()
    const fx = await makeDefinition(t.db)
    const scopes = ['running', 'paused', 'ending', 'ended', 'healthy', 'ahead']
    const [running, paused, ending, ended, healthy] = (
      await Promise.all(scopes.map((scope) => makeRun(t.db, { definition: fx, scope })))
    ).map((r) => r.id) as [number, number, number, number, number]
    for (const id of [running, paused, ending, ended, healthy])
      expect(await runs.transition(t.db, id, 'scheduled', 'running')).toBe(true)
    for (const id of [running, paused, ending, ended]) await runs.setHealth(t.db, id, 'degraded')
    expect(await runs.transition(t.db, paused, 'running', 'paused')).toBe(true)
    expect(await runs.transition(t.db, ending, 'running', 'ending')).toBe(true)
    expect(await runs.transition(t.db, ended, 'running', 'failed')).toBe(true)
    // What 0028's index answers for the same rows.
    const [byIndex] = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs FORCE INDEX (idx_evrun_degraded_live) WHERE degraded_live = 1`,
    )
    expect(Number(byIndex?.n)).toBe(3)

    const rest = await migrate(t.db)
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await indexNames(t.db, 'event_runs')).not.toContain('idx_evrun_degraded_live')
    const columns = await t.db.query<{ COLUMN_NAME: string }>(
      `SELECT COLUMN_NAME FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'event_runs'`,
    )
    expect(columns.map((c) => c.COLUMN_NAME)).not.toContain('degraded_live')
    expect(await runs.countDegraded(t.db)).toBe(3)

    // The file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
    expect(await runs.countDegraded(t.db)).toBe(3)
  })
})
