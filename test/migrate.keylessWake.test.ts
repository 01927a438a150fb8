/**
 * Migration 0030 (key-less scheduled runs lose their `wake_at`, which the
 * start no longer reads) on a database that was at 0029 and holds runs of
 * every kind: it applies, clears exactly those runs' `wake_at`, the runner's
 * reads find what they found before, and it runs again without error. A
 * fresh database is covered by migrate.test.ts.
 */
import { describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { migrate } from '../sql/migrate.ts'
import { at, makeDefinition, makeRun } from './helpers/fixtures.ts'
import { runFilesAgain, useDatabaseUpTo } from './helpers/migrationsUpTo.ts'

const NEW = ['0030_wake_index_without_scheduled.sql']

const held = useDatabaseUpTo('0029_retries_beside_runs.sql')
const t = held.t

describe('from 0029 with data', () => {
  it('applies 0030: key-less scheduled runs lose their wake_at, the others keep theirs', async () => {
    await held.migrateToHeld()
    const fx = await makeDefinition(t.db)
    const now = new Date()
    const made = async (scope: string, scheduledFor: Date, concurrencyKey: string | null) =>
      (await makeRun(t.db, { definition: fx, scope, scheduledFor, concurrencyKey })).id
    const due = await made('due', at(-2_000, now), null)
    const ahead = await made('ahead', at(60_000, now), null)
    const keyed = await made('keyed', at(30_000, now), 'k')
    const leased = await made('leased', at(-5_000, now), null)
    // 0029's code wrote every new run's wake_at as its scheduled_for.
    await t.db.run('UPDATE event_runs SET wake_at = scheduled_for WHERE id IN (?, ?, ?)', [
      due,
      ahead,
      leased,
    ])
    expect(
      await runs.claimStart(t.db, { id: leased, concurrencyKey: null }, 'w1', at(20_000, now), now),
    ).toMatchObject({ claimed: true })

    const rest = await migrate(t.db)
    expect(rest.applied.slice(0, NEW.length)).toEqual(NEW)
    expect(await migrate(t.db)).toMatchObject({ applied: [] })
    const check = async () => {
      const rows = await t.db.query<{ id: number; w: Date | null }>(
        'SELECT id, wake_at AS w FROM event_runs ORDER BY id',
      )
      expect(rows.map((r) => [Number(r.id), r.w?.getTime() ?? null])).toEqual([
        [due, null],
        [ahead, null],
        [keyed, at(30_000, now).getTime()],
        [leased, at(20_000, now).getTime()],
      ])
      // The runner's sleep is aimed at the soonest of them, whichever index holds it.
      expect((await runs.nextWakeAfter(t.db, now))?.getTime()).toBe(at(20_000, now).getTime())
      expect((await runs.nextWakeAfter(t.db, at(30_000, now)))?.getTime()).toBe(at(60_000, now).getTime())
      // The start finds the due key-less run, and only it (rolled back: nothing is started here).
      const locked = await t.db
        .transaction(async (tx) => {
          const found = await runs.lockDueToStart(tx, now, 100)
          throw Object.assign(new Error('roll back'), { found })
        })
        .catch((e: { found?: { id: number }[] }) => e.found)
      expect(locked?.map((r) => r.id)).toEqual([due])
    }
    await check()

    // The file runs again without error (a migrator killed halfway repeats it).
    await runFilesAgain(t.db, NEW)
    await check()
  })
})
