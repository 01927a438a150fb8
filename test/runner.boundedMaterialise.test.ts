/**
 * Materialisation bounded per (definition, scope) by count as well as by
 * horizon: a `* * * * * *` schedule over 1,000 scopes keeps a rolling window
 * across passes, writes a bounded number of rows per pass, and never loses an
 * instant (each scope's occurrences are contiguous from first to last), even
 * when a pass comes later than the window lasts.
 */
import { describe, expect, it } from 'vitest'
import { aheadCountStats, forgetAheadCounts } from '../src/runner/aheadCount.ts'
import { DEFAULT_MAX_RUNS_AHEAD, materialiseAll, materialiseDefinition } from '../src/runner/materialise.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { defineEvent, makeRegistry, program, type RunnerTestEnv, TestClock } from './helpers/runnerHarness.ts'

const t = useTestDb()
const LOG_ONLY = program(['main', [{ kind: 'core.log', params: { message: 'tick' } }]])
const DAY_MS = 24 * 3600_000

interface ScopeSpan {
  scope: string
  n: number
  first: number
  last: number
  ahead: number
}

async function spans(definitionId: number, now: Date): Promise<ScopeSpan[]> {
  const rows = await t.db.query<Record<string, unknown>>(
    `SELECT scope, COUNT(*) AS n, COUNT(DISTINCT scheduled_for) AS d, MIN(scheduled_for) AS first,
            MAX(scheduled_for) AS last, SUM(scheduled_for > ?) AS ahead
       FROM event_runs WHERE definition_id = ? GROUP BY scope ORDER BY scope`,
    [now, definitionId],
  )
  return rows.map((r) => {
    expect(Number(r.d)).toBe(Number(r.n))
    return {
      scope: String(r.scope),
      n: Number(r.n),
      first: (r.first as Date).getTime(),
      last: (r.last as Date).getTime(),
      ahead: Number(r.ahead),
    }
  })
}

describe('bounded materialisation', () => {
  it('the default bound is documented and finite', () => {
    expect(DEFAULT_MAX_RUNS_AHEAD).toBe(1000)
  })

  it('`* * * * * *` over 1,000 scopes: a rolling window, bounded rows per pass, no lost instant across passes', async () => {
    const clock = new TestClock('2030-03-01T12:00:00.000Z')
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
    const scopes = Array.from({ length: 1000 }, (_, i) => `s${String(i).padStart(4, '0')}`)
    const def = await defineEvent(env, { schedule: '* * * * * *', scopes, program: LOG_ONLY })
    const maxRunsAhead = 12
    const bounds = { horizonMs: DAY_MS, maxRunsAhead }
    const start = clock.now().getTime()
    const heapBefore = process.memoryUsage().heapUsed
    // Passes at +0 s, +5 s, +9 s, then one after 40 s of silence (longer than
    // the window lasts), then two more.
    let lastRefill: Date | null = null
    for (const step of [0, 5_000, 4_000, 40_000, 3_000, 1_000]) {
      const now = clock.advance(step)
      const pass = await materialiseAll(t.db, now, bounds, (_d, err) => {
        throw err
      })
      // Never more than the bound per scope in one pass.
      expect(pass.created).toBeLessThanOrEqual(scopes.length * maxRunsAhead)
      lastRefill = pass.refillAt
      const all = await spans(def.id, now)
      expect(all).toHaveLength(scopes.length)
      for (const s of all) {
        // The window: never more than the bound ahead of now…
        expect(s.ahead).toBeLessThanOrEqual(maxRunsAhead)
        // …and no lost instant: every second from the first to the last exists.
        expect(s.first).toBe(start + 1000)
        expect(s.n).toBe((s.last - s.first) / 1000 + 1)
      }
    }
    // After the 40 s gap, each pass catches up by at most the bound per scope;
    // a few more passes at the same moment reach the full window, and then stop.
    let passes = 0
    for (;;) {
      const pass = await materialiseAll(t.db, clock.now(), bounds, (_d, err) => {
        throw err
      })
      lastRefill = pass.refillAt
      if (pass.created === 0) break
      expect(++passes).toBeLessThan(10)
    }
    const now = clock.now().getTime()
    const final = await spans(def.id, clock.now())
    for (const s of final) expect(s.last).toBe(now + maxRunsAhead * 1000)
    // A window that is count-bounded asks for the next pass before it runs out.
    expect(lastRefill?.getTime()).toBe(now + (maxRunsAhead * 1000) / 2)
    // Memory follows the bound, not the schedule (a day of seconds × 1,000 scopes would be 86 M objects).
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(200 * 1024 * 1024)
  }, 120_000)

  it('a pass counts the runs ahead by what came due since the last one, not by walking the whole window', async () => {
    const clock = new TestClock('2030-03-01T12:00:00.000Z')
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
    const def = await defineEvent(env, { schedule: '* * * * * *', program: LOG_ONLY })
    const bounds = { horizonMs: DAY_MS }
    const walkedBy = async (pass: () => Promise<unknown>) => {
      const before = aheadCountStats.walked
      await pass()
      return aheadCountStats.walked - before
    }
    const window = async () => {
      const [span] = await spans(def.id, clock.now())
      expect(span?.ahead).toBe(DEFAULT_MAX_RUNS_AHEAD)
      expect(span?.last).toBe(clock.now().getTime() + DEFAULT_MAX_RUNS_AHEAD * 1000)
      expect(span?.n).toBe(((span?.last ?? 0) - (span?.first ?? 0)) / 1000 + 1)
    }
    await materialiseDefinition(t.db, def, clock.now(), bounds)
    await window()
    // Again at the same instant (a definition changed): the window is full, nothing to walk or write.
    expect(await walkedBy(() => materialiseDefinition(t.db, def, clock.now(), bounds))).toBeLessThanOrEqual(1)
    await window()
    // A minute later (the runner's usual interval): a minute of occurrences
    // came due, so about 60 are walked, not the 940 still ahead.
    clock.advance(60_000)
    expect(await walkedBy(() => materialiseDefinition(t.db, def, clock.now(), bounds))).toBeLessThanOrEqual(
      62,
    )
    await window()
    // With nothing remembered (a restart, another instance's pass), the full
    // count, and the same window.
    clock.advance(60_000)
    forgetAheadCounts()
    expect(await walkedBy(() => materialiseDefinition(t.db, def, clock.now(), bounds))).toBeGreaterThan(900)
    await window()
  }, 60_000)

  it('remembered counts make the same runs as counting afresh on every pass', async () => {
    const clock = new TestClock('2030-03-10T06:30:00.000Z')
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
    // A sparse pattern across New York's spring-forward night, a bound it
    // reaches, and passes at uneven intervals, one after the window ran out.
    const input = {
      schedule: '*/20 * 1-3,7 * * *',
      timezone: 'America/New_York',
      scopes: ['a', 'b'],
      program: LOG_ONLY,
    }
    const remembering = await defineEvent(env, input)
    const afresh = await defineEvent(env, input)
    const bounds = { horizonMs: DAY_MS, maxRunsAhead: 150 }
    for (const step of [0, 60_000, 1_000, 600_000, 4 * 3600_000, 20_000, 7_000, 3600_000]) {
      clock.advance(step)
      await materialiseDefinition(t.db, remembering, clock.now(), bounds)
      forgetAheadCounts(afresh.id)
      await materialiseDefinition(t.db, afresh, clock.now(), bounds)
      const mine = await spans(remembering.id, clock.now())
      const theirs = await spans(afresh.id, clock.now())
      expect(mine).toEqual(theirs)
      for (const span of mine) expect(span.ahead).toBeLessThanOrEqual(150)
    }
  }, 60_000)

  it('the runner tops a count-bounded window up before it runs out, not only every materialiseEveryMs', async () => {
    const clock = new TestClock('2030-03-01T12:00:00.000Z')
    const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
    const def = await defineEvent(env, { schedule: '* * * * * *', program: LOG_ONLY })
    const runner = new Runner({
      db: t.db,
      registry: env.registry,
      clock,
      maxRunsAhead: 10,
      materialiseEveryMs: 3600_000,
      instanceId: 'bounded-refill',
    })
    const start = clock.now().getTime()
    for (let i = 0; i < 8; i++) {
      await runner.tick()
      clock.advance(3_000)
    }
    const [s] = await spans(def.id, clock.now())
    expect(s?.first).toBe(start + 1000)
    expect(s?.n).toBe(((s?.last ?? 0) - (s?.first ?? 0)) / 1000 + 1)
    // Topped up at least to the moment of the last tick.
    expect(s?.last).toBeGreaterThan(clock.now().getTime() - 3_000)
    const counts = await t.db.query<Record<string, unknown>>(
      `SELECT status, COUNT(*) AS n FROM event_runs WHERE definition_id = ? GROUP BY status`,
      [def.id],
    )
    // Every occurrence became a run that started (completed) or was missed for lateness; none vanished.
    const total = counts.reduce((a, r) => a + Number(r.n), 0)
    expect(total).toBe(s?.n)
  }, 60_000)
})
