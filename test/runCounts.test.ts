/**
 * Runs by status for /metrics (src/runCounts.ts): live statuses exact on every
 * read, terminal ones from a full count taken at most once per max age, in the
 * background once a value exists, one at a time.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { makeDefinition, makeRun, resetRuns } from './helpers/fixtures.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

/** A clock the test moves by hand. */
function manualClock(start = 1_000_000) {
  let now = start
  return { now: () => now, advance: (ms: number) => (now += ms) }
}

async function until(check: () => Promise<boolean>, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('runs by status for /metrics', () => {
  it('counts live statuses on every read and terminal ones at most once per max age', async () => {
    const fx = await makeDefinition(t.db)
    const [a, b, c] = [
      await makeRun(t.db, { definition: fx, scope: 'a' }),
      await makeRun(t.db, { definition: fx, scope: 'b' }),
      await makeRun(t.db, { definition: fx, scope: 'c' }),
    ]
    await runs.transition(t.db, a.id, 'scheduled', 'completed')
    const clock = manualClock()
    const read = createRunCounts(t.db, { terminalMaxAgeMs: 60_000, now: clock.now })

    expect(await read()).toEqual({
      scheduled: 2,
      starting: 0,
      running: 0,
      paused: 0,
      ending: 0,
      completed: 1,
      cancelled: 0,
      failed: 0,
      missed: 0,
    })

    // A live move shows at once; a terminal one waits for the next full count.
    await runs.transition(t.db, b.id, 'scheduled', 'running')
    await runs.transition(t.db, c.id, 'scheduled', 'cancelled')
    clock.advance(59_000)
    expect(await read()).toMatchObject({ scheduled: 0, running: 1, completed: 1, cancelled: 0 })

    // Past the max age: this read starts a full count in the background (it may
    // or may not be done by the time the read answers)...
    clock.advance(1_000)
    expect(await read()).toMatchObject({ running: 1 })
    // ...and a later read has the fresh terminal counts.
    await until(async () => (await read()).cancelled === 1)
    expect(await read()).toMatchObject({ scheduled: 0, running: 1, completed: 1, cancelled: 1 })
  })

  it('a scrape with fresh terminal counts reads only the live statuses; overlapping first reads share one full count', async () => {
    await makeRun(t.db)
    const clock = manualClock()
    const read = createRunCounts(t.db, { now: clock.now })
    const before = t.db.stats.statements
    await Promise.all([read(), read(), read()])
    // One full count, then one live count per read.
    expect(t.db.stats.statements - before).toBe(1 + 3)
    const after = t.db.stats.statements
    await read()
    expect(t.db.stats.statements - after).toBe(1)
  })

  it('a failed background count is reported and the last terminal counts are kept', async () => {
    const fx = await makeDefinition(t.db)
    const done = await makeRun(t.db, { definition: fx, scope: 'done' })
    await runs.transition(t.db, done.id, 'scheduled', 'failed')
    // The real database, with the full count (the one without a status filter) made to fail on demand.
    let failFullCount = false
    const flaky = wrapStatements(t.db, 'execute', (real) => (sql, args) => {
      if (failFullCount && !sql.includes('WHERE status IN')) return Promise.reject(new Error('count refused'))
      return real(sql, args)
    })
    const errors: unknown[] = []
    const clock = manualClock()
    const read = createRunCounts(flaky, {
      terminalMaxAgeMs: 1000,
      now: clock.now,
      onRefreshError: (e) => errors.push(e),
    })
    expect(await read()).toMatchObject({ failed: 1 })

    failFullCount = true
    clock.advance(1000)
    expect(await read()).toMatchObject({ failed: 1 })
    await until(async () => errors.length > 0)
    expect(String(errors[0])).toMatch(/count refused/)
    expect(await read()).toMatchObject({ failed: 1 })
  })

  it('with no counts yet, a failed full count fails the read (the gauge is left out of that scrape)', async () => {
    const broken = wrapStatements(t.db, 'execute', () => () => Promise.reject(new Error('database away')))
    await expect(createRunCounts(broken)()).rejects.toThrow(/database away/)
  })
})
