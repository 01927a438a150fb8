/**
 * Migration 0024 (no foreign keys from a run's rows to the run) on a database
 * that was at 0023 and holds runs with steps, cue ladders, answer links and
 * log lines: it applies, keeps every row and index, leaves the definition's
 * key on runs alone, and runs again without error. A fresh database is
 * covered by migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import * as ladders from '../sql/cueLadders.ts'
import * as logs from '../sql/eventRunLogs.ts'
import { migrate } from '../sql/migrate.ts'
import * as links from '../sql/notifications/cueLinks.ts'
import { makeDefinition, makeRunWithSteps } from './helpers/fixtures.ts'
import { indexNames, runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = ['0024_run_children_unkeyed.sql']

const held = useDatabaseUpTo('0023_waiting_steps_only.sql')
const t = held.t
const indexesOf = (table: string) => indexNames(t.db, table)

async function foreignKeys(): Promise<string[]> {
  const rows = await t.db.query<{ CONSTRAINT_NAME: string }>(
    `SELECT CONSTRAINT_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
      WHERE CONSTRAINT_SCHEMA = DATABASE() ORDER BY CONSTRAINT_NAME`,
  )
  return rows.map((r) => r.CONSTRAINT_NAME)
}

const CHILDREN = ['event_run_steps', 'event_run_logs', 'cue_ladders', 'cue_links']

async function counts(): Promise<number[]> {
  const out: number[] = []
  for (const table of ['event_runs', ...CHILDREN])
    out.push(Number((await t.db.query<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`))[0]?.n))
  return out
}

describe('from 0023 with data', () => {
  it('applies 0024: the four run-side keys go, rows and indexes stay', async () => {
    await held.migrateToHeld()
    expect(await foreignKeys()).toEqual(
      expect.arrayContaining(['fk_cueladder_step', 'fk_cuelink_step', 'fk_evlog_run', 'fk_evstep_run']),
    )

    const fx = await makeDefinition(t.db)
    const { run, steps } = await makeRunWithSteps(t.db, 2, { definition: fx, scope: 'm' })
    const cue = steps[0]?.id as number
    await ladders.openMany(t.db, [
      {
        stepId: cue,
        runId: run.id,
        prompt: 'Open the gates',
        openedAt: new Date(),
        deadlineAt: null,
        assignees: ['gm'],
        exclusive: false,
      },
    ])
    await links.create(t.db, 'a'.repeat(64), cue, 'slack')
    await logs.appendMany(t.db, [{ runId: run.id, message: 'before 0024' }])
    const before = await counts()
    const indexesBefore = await Promise.all(CHILDREN.map(indexesOf))

    const rest = await migrate(t.db)
    // 0024 first, then whatever came after it.
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await migrate(t.db)).toMatchObject({ applied: [] })
    expect(await counts()).toEqual(before)
    expect(before).toEqual([1, 2, 1, 1, 1])

    const left = await foreignKeys()
    for (const gone of ['fk_cueladder_step', 'fk_cuelink_step', 'fk_evlog_run', 'fk_evstep_run'])
      expect(left).not.toContain(gone)
    // The keys that are not written per run or step stay.
    expect(left).toEqual(
      expect.arrayContaining([
        'fk_evrun_definition',
        'fk_evver_definition',
        'fk_notifdelivery_channel',
        'fk_notifdelivery_event',
      ]),
    )
    // InnoDB made no index of its own for these keys: every index the reads use is still there.
    expect(await Promise.all(CHILDREN.map(indexesOf))).toEqual(indexesBefore)
    expect(await indexesOf('event_run_logs')).toContain('idx_evlog_run')
    expect(await indexesOf('event_run_steps')).toContain('uq_evstep_run_seq')
    expect(await indexesOf('cue_links')).toContain('idx_cuelink_step')
    expect(await indexesOf('cue_ladders')).toContain('idx_cueladder_run')

    // The file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
  })
})
