/**
 * Migration 0028 (idx_evrun_ended_health goes; live degraded runs get an index
 * of their own, which 0031 drops again) on a database that was at 0027 and
 * holds runs of every kind: it applies, keeps every row, answers the degraded
 * count and the counts by status as before, and runs again without error. A
 * fresh database is covered by migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { migrate } from '../sql/migrate.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { indexNames, runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = ['0028_end_counts_without_ended_index.sql']

const held = useDatabaseUpTo('0027_run_alerts_without_trigger.sql')
const t = held.t

describe('from 0027 with data', () => {
  it('applies 0028: degraded live runs and the counts by status read the same', async () => {
    await held.migrateToHeld()
    const fx = await makeDefinition(t.db)
    const [live, degradedLive, degradedEnded, done, ahead] = await Promise.all(
      ['live', 'degraded-live', 'degraded-ended', 'done', 'ahead'].map((scope) =>
        makeRun(t.db, { definition: fx, scope }),
      ),
    )
    for (const r of [live, degradedLive, degradedEnded])
      expect(await runs.transition(t.db, r?.id as number, 'scheduled', 'running')).toBe(true)
    await runs.setHealth(t.db, degradedLive?.id as number, 'degraded')
    await runs.setHealth(t.db, degradedEnded?.id as number, 'degraded')
    expect(await runs.transition(t.db, degradedEnded?.id as number, 'running', 'failed')).toBe(true)
    expect(await runs.transition(t.db, done?.id as number, 'scheduled', 'completed')).toBe(true)
    expect(ahead).toBeDefined()
    const before = await runs.countByStatus(t.db)

    const rest = await migrate(t.db)
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await migrate(t.db)).toMatchObject({ applied: [] })

    const indexes = await indexNames(t.db, 'event_runs')
    expect(indexes).not.toContain('idx_evrun_ended_health')
    // (0031 drops the degraded index 0028 made: the count reads the runs in flight.)
    expect(indexes).not.toContain('idx_evrun_degraded_live')
    expect(await runs.countDegraded(t.db)).toBe(1)
    expect(await runs.countByStatus(t.db)).toEqual(before)
    expect(await createRunCounts(t.db, { lagSeconds: 0 })()).toEqual(before)

    // Each new file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
  })
})
