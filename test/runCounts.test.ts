/**
 * Runs by status for /metrics and `health` (src/runCounts.ts): the table is
 * counted once up to two marks, then each read counts only what lies past them
 * and the runs in flight; every figure stays exact as runs move, end, are made
 * and as the marks move on.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun, resetRuns } from './helpers/fixtures.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

/** A clock the test moves by hand. */
function manualClock(start = 1_000_000) {
  let now = start
  return { now: () => now, advance: (ms: number) => (now += ms) }
}

/** What a full count would answer now. */
async function truth(): Promise<Record<string, number>> {
  return runs.countByStatus(t.db)
}

/** Age every run by `seconds` (made and ended that long ago), so it falls behind the marks. */
async function age(seconds: number): Promise<void> {
  await t.db.run(
    `UPDATE event_runs SET created_at = created_at - INTERVAL ? SECOND,
            ended_at = ended_at - INTERVAL ? SECOND`,
    [seconds, seconds],
  )
}

describe('runs by status for /metrics and health', () => {
  it('stays exact as runs are made, move and end, whether the marks moved past them or not', async () => {
    const fx = await makeDefinition(t.db)
    const made = await Promise.all(
      ['a', 'b', 'c', 'd', 'e'].map((scope) => makeRun(t.db, { definition: fx, scope })),
    )
    const [a, b, c, d] = made.map((r) => r.id) as [number, number, number, number]
    await runs.transition(t.db, a, 'scheduled', 'completed')
    await runs.transition(t.db, b, 'scheduled', 'running')
    // Marks at the database's clock: one reader moves them on every read (what
    // changed is then counted once into its base), the other never (what changed
    // is counted past its marks on every read).
    const moving = createRunCounts(t.db, { lagSeconds: 0, advanceEveryMs: 0 })
    const still = createRunCounts(t.db, { lagSeconds: 0, advanceEveryMs: 3_600_000 })
    const check = async () => {
      const expected = await truth()
      expect(await moving()).toEqual(expected)
      expect(await still()).toEqual(expected)
    }
    await check()
    expect(await moving()).toMatchObject({ scheduled: 3, running: 1, completed: 1 })

    await runs.transition(t.db, b, 'running', 'failed')
    await runs.transition(t.db, c, 'scheduled', 'cancelled')
    await makeRun(t.db, { definition: fx, scope: 'f' })
    await check()
    expect(await moving()).toMatchObject({ scheduled: 3, running: 0, failed: 1, cancelled: 1 })

    await runs.transition(t.db, d, 'scheduled', 'missed')
    await makeRun(t.db, { definition: fx, scope: 'g' })
    await runs.transition(t.db, made[4]?.id as number, 'scheduled', 'paused')
    await check()
    expect(await still()).toMatchObject({ scheduled: 2, paused: 1, missed: 1, completed: 1, cancelled: 1 })
  })

  it('runs deleted behind the marks are forgotten at the next full count', async () => {
    const fx = await makeDefinition(t.db)
    const old = await makeRun(t.db, { definition: fx, scope: 'old' })
    await runs.transition(t.db, old.id, 'scheduled', 'completed')
    await makeRun(t.db, { definition: fx, scope: 'ahead' })
    await age(3600)
    const clock = manualClock()
    const read = createRunCounts(t.db, { now: clock.now, fullEveryMs: 10_000 })
    expect(await read()).toMatchObject({ completed: 1, scheduled: 1 })
    await t.db.run('DELETE FROM event_runs WHERE id = ?', [old.id])
    // Still counted: it was behind the marks.
    expect(await read()).toMatchObject({ completed: 1, scheduled: 1 })
    clock.advance(10_000)
    await read() // starts the full count in the background
    const deadline = Date.now() + 5000
    while ((await read()).completed !== 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20))
    expect(await read()).toEqual(await truth())
  })

  it('counts a run ended past the marks once however often it changes after, and one ended behind them not again', async () => {
    const fx = await makeDefinition(t.db)
    const behind = await makeRun(t.db, { definition: fx, scope: 'behind' })
    await runs.transition(t.db, behind.id, 'scheduled', 'completed')
    await age(3600) // made and ended an hour ago; its updated_at is now, past the marks
    const still = createRunCounts(t.db, { advanceEveryMs: 3_600_000 })
    const moving = createRunCounts(t.db, { advanceEveryMs: 0 })
    expect(await still()).toEqual(await truth())
    expect(await moving()).toEqual(await truth())

    // Ended after the marks (lag 120 s), then changed again twice: the ended
    // runs past a mark are found by updated_at, and counted by ended_at.
    const recent = await makeRun(t.db, { definition: fx, scope: 'recent' })
    await runs.transition(t.db, recent.id, 'scheduled', 'running')
    await runs.setHealth(t.db, recent.id, 'degraded')
    await runs.transition(t.db, recent.id, 'running', 'failed')
    await t.db.run(`UPDATE event_runs SET current_phase = 'after' WHERE id IN (?, ?)`, [recent.id, behind.id])
    await t.db.run(`UPDATE event_runs SET last_error = 'noted' WHERE id IN (?, ?)`, [recent.id, behind.id])
    const expected = await truth()
    expect(expected).toMatchObject({ completed: 1, failed: 1 })
    expect(await still()).toEqual(expected)
    expect(await moving()).toEqual(expected)
  })

  it('counts live degraded runs from the in-flight ranges, reading the runs in flight and nothing else', async () => {
    const fx = await makeDefinition(t.db)
    const made = await Promise.all(
      Array.from({ length: 40 }, (_, i) => makeRun(t.db, { definition: fx, scope: `d${i}` })),
    )
    // Made ahead and never started: as many again, which the count must not read.
    await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        makeRun(t.db, { definition: fx, scope: `ahead${i}`, scheduledFor: new Date(Date.now() + 3_600_000) }),
      ),
    )
    for (const r of made) await runs.transition(t.db, r.id, 'scheduled', 'running')
    const [a, b, c, d] = made.map((r) => r.id) as [number, number, number, number]
    for (const id of [a, b, c, d]) await runs.setHealth(t.db, id, 'degraded')
    await runs.transition(t.db, c, 'running', 'failed') // degraded, but no longer live
    await runs.transition(t.db, d, 'running', 'paused') // degraded and paused: still live
    for (const r of made.slice(4, 30)) await runs.transition(t.db, r.id, 'running', 'completed')
    expect(await runs.countDegraded(t.db)).toBe(3)
    const inFlight = 40 - 1 - 26

    const one = t.open({ connectionLimit: 1 })
    try {
      const handlerReads = async () =>
        (await one.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Handler_read%'")).reduce(
          (sum, r) => sum + Number(r.Value),
          0,
        )
      const before = await handlerReads()
      expect(await runs.countDegraded(one)).toBe(3)
      // The runs in flight and the ends of the four status ranges: not the
      // 200 scheduled runs nor the 27 ended ones.
      expect((await handlerReads()) - before).toBeLessThanOrEqual(inFlight + 8)
    } finally {
      await one.close()
    }
  })

  it('overlapping first reads share one full count', async () => {
    await makeRun(t.db)
    const read = createRunCounts(t.db)
    const before = t.db.stats.statements
    await Promise.all([read(), read(), read()])
    // One full count (begin, 3 statements, commit), then one read each (begin, 3 statements, commit).
    expect(t.db.stats.statements - before).toBe(5 + 3 * 5)
  })

  it('with no counts yet, a failed full count fails the read (the gauge is left out of that scrape)', async () => {
    const broken = t.open({ connectionLimit: 1 })
    await broken.run('SET SESSION max_statement_time = 0.000001')
    await broken.close()
    await expect(createRunCounts(broken)()).rejects.toThrow()
  })
})
