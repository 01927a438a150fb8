/**
 * Migrations 0020–0023 (fewer index writes per run) on a database that was at
 * 0018 and holds runs and steps: they apply, keep every row, and the reads
 * they moved to other indexes answer what they answered before. A fresh
 * database is covered by migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { migrate } from '../sql/migrate.ts'
import { listRuns, pageKeys } from '../sql/runPage.ts'
import { makeDefinition, makeRun, makeRunWithSteps } from './helpers/fixtures.ts'
import { indexNames, runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = [
  '0020_missed_sweep_by_status.sql',
  '0021_definition_list_by_status.sql',
  '0022_run_list_by_rehearsal.sql',
  '0023_waiting_steps_only.sql',
]

const held = useDatabaseUpTo('0018_claim_token_unindexed.sql')
const t = held.t
const indexesOf = (table: string) => indexNames(t.db, table)

describe('from 0018 with data', () => {
  it('applies 0020–0023, keeps the rows, and the moved reads answer as before', async () => {
    await held.migrateToHeld()
    expect(await indexesOf('event_runs')).toContain('idx_evrun_missed')

    const now = Date.now()
    const fx = await makeDefinition(t.db, { graceSeconds: 60 })
    const other = await makeDefinition(t.db, { graceSeconds: 3600 })
    const late = await makeRun(t.db, { definition: fx, scope: 'late', scheduledFor: new Date(now - 600_000) })
    const within = await makeRun(t.db, {
      definition: other,
      scope: 'w',
      scheduledFor: new Date(now - 600_000),
    })
    const ahead = await makeRun(t.db, {
      definition: fx,
      scope: 'ahead',
      scheduledFor: new Date(now + 600_000),
    })
    const rehearsal = await makeRun(t.db, {
      definition: fx,
      scope: 'r',
      scheduledFor: new Date(now - 1_000),
      rehearsal: true,
    })
    const done = await makeRun(t.db, {
      definition: other,
      scope: 'done',
      scheduledFor: new Date(now - 7_200_000),
    })
    // Ended by hand: today's terminal move stamps a column (alerts_checked) that 0018 does not have.
    await t.db.run(`UPDATE event_runs SET status = 'completed', ended_at = NOW(3) WHERE id = ?`, [done.id])
    const parked = await makeRunWithSteps(t.db, 2, {
      definition: fx,
      scope: 'cue',
      scheduledFor: new Date(now - 2_000),
    })
    expect(await runs.transition(t.db, parked.run.id, 'scheduled', 'running')).toBe(true)
    const [cue] = parked.steps
    expect(await steps.begin(t.db, cue?.id as number, 'w', new Date(now + 30_000), new Date(now))).toBe(true)
    expect(await steps.park(t.db, cue?.id as number, null)).toBe(true)
    const before = await t.db.query<{ n: number }>(
      'SELECT (SELECT COUNT(*) FROM event_runs) + (SELECT COUNT(*) FROM event_run_steps) AS n',
    )

    const rest = await migrate(t.db)
    // Later migrations (0024 on) apply after these and have their own tests.
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await migrate(t.db)).toMatchObject({ applied: [] })
    const after = await t.db.query<{ n: number }>(
      'SELECT (SELECT COUNT(*) FROM event_runs) + (SELECT COUNT(*) FROM event_run_steps) AS n',
    )
    expect(Number(after[0]?.n)).toBe(Number(before[0]?.n))

    const runIndexes = await indexesOf('event_runs')
    for (const gone of ['idx_evrun_missed', 'idx_evrun_definition_list', 'idx_evrun_list'])
      expect(runIndexes).not.toContain(gone)
    expect(runIndexes).toHaveLength(9) // PRIMARY and 8 secondary, after every later migration
    expect(await indexesOf('event_run_steps')).toEqual([
      'PRIMARY',
      'idx_evstep_waiting_since',
      'uq_evstep_run_seq',
    ])
    expect(await indexesOf('event_definitions')).toContain('idx_evdef_grace')

    // The missed sweep: the late run, not the one within its longer grace, nor the one ahead.
    expect((await runs.findMissed(t.db, new Date(now), 500)).map((r) => r.id)).toEqual([late.id])
    // The cue parked before the migration is waiting after it (the virtual column is computed for old rows).
    expect((await steps.listWaiting(t.db)).map((s) => s.id)).toEqual([cue?.id])
    expect((await steps.waitingSummary(t.db)).count).toBe(1)
    // Every run's list, and one definition's, newest first (ties by id, newest first), from the indexes that remain.
    const all = [ahead, rehearsal, parked.run, within, late, done].map((r) => r.id)
    expect((await listRuns(t.db, { limit: 500 })).map((r) => r.id)).toEqual(all)
    const ofFx = [ahead, rehearsal, parked.run, late].map((r) => r.id)
    expect((await pageKeys(t.db, { definitionId: fx.def.id }, 100, null)).map((k) => k.id)).toEqual(ofFx)

    // Each new file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
  })
})
