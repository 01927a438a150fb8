/**
 * Migration 0029 (uq_evrun_retry_of goes; one retry per original is kept by
 * event_run_retries) on a database that was at 0028 and holds an original with
 * its retry and runs that retry nothing: it applies, copies the retry into the
 * table, leaves the others out, refuses a second retry of the same original
 * afterwards, and runs again without error. A fresh database is covered by
 * migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import { DB_ERRNO, isDbErrno } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { migrate } from '../sql/migrate.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { indexNames, runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = ['0029_retries_beside_runs.sql']

const held = useDatabaseUpTo('0028_end_counts_without_ended_index.sql')
const t = held.t

describe('from 0028 with data', () => {
  it('applies 0029: the retry found before is found after, and a second is still refused', async () => {
    await held.migrateToHeld()
    const fx = await makeDefinition(t.db)
    const [original, retry, plain, other] = await Promise.all(
      ['original', 'retry', 'plain', 'other'].map(
        async (scope) => (await makeRun(t.db, { definition: fx, scope })).id,
      ),
    )
    expect(await runs.transition(t.db, original as number, 'scheduled', 'failed')).toBe(true)
    // A retry as 0028's code wrote it: the run's own column, under the unique index.
    await t.db.run("UPDATE event_runs SET retry_of = ?, status = 'starting' WHERE id = ?", [
      original as number,
      retry as number,
    ])

    const rest = await migrate(t.db)
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await migrate(t.db)).toMatchObject({ applied: [] })

    expect(await indexNames(t.db, 'event_runs')).not.toContain('uq_evrun_retry_of')
    expect(await indexNames(t.db, 'event_run_retries')).toEqual(['PRIMARY', 'idx_evretry_run'])
    const records = async () =>
      (
        await t.db.query<{ o: number; r: number }>(
          'SELECT original_id AS o, run_id AS r FROM event_run_retries',
        )
      ).map((x) => [Number(x.o), Number(x.r)])
    expect(await records()).toEqual([[original, retry]])
    expect(await runs.retryOf(t.db, original as number)).toBe(retry)
    expect(await runs.retryOf(t.db, plain as number)).toBeNull()
    const second = await t.db
      .transaction((tx) => runs.startAsRetry(tx, other as number, original as number, new Date()))
      .catch((e: unknown) => e)
    expect(isDbErrno(second, DB_ERRNO.DUP_ENTRY)).toBe(true)

    // Each new file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
    expect(await records()).toEqual([[original, retry]])
  })
})
