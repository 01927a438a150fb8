/**
 * `missed_at`: the instant a scheduled run becomes missed. Stamped when the run
 * is made (its start plus its definition's grace), moved for every scheduled
 * run of a definition whose grace changes, and dropped by every move out of
 * `scheduled`; the missed sweep, the keyed claim and the batch start all
 * compare it, so they agree at the boundary.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { updateDefinition } from '../src/operations/definitions.ts'
import { Housekeeping } from '../src/runner/housekeeping.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun, rawRun, resetRuns } from './helpers/fixtures.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

const T = new Date('2030-01-01T12:00:00.000Z')
const at = (ms: number) => new Date(T.getTime() + ms)

async function missedAtOf(id: number): Promise<Date | null> {
  return ((await rawRun(t.db, id)).missed_at as Date | null) ?? null
}

describe('missed_at', () => {
  it('is the start plus the grace, moves with a grace change for scheduled runs only, and goes when the run leaves scheduled', async () => {
    const fx = await makeDefinition(t.db, { graceSeconds: 60 })
    const waiting = await makeRun(t.db, { definition: fx, scope: 'w', scheduledFor: T })
    const started = await makeRun(t.db, { definition: fx, scope: 's', scheduledFor: T })
    expect(await missedAtOf(waiting.id)).toEqual(at(60_000))
    expect(await runs.transition(t.db, started.id, 'scheduled', 'running')).toBe(true)
    expect(await missedAtOf(started.id)).toBeNull()

    const deps = { db: t.db, registry: createDefaultRegistry(), clock: { now: () => T } }
    await updateDefinition(deps, fx.def.id, { graceSeconds: 600 }, 'test')
    expect(await missedAtOf(waiting.id)).toEqual(at(600_000))
    expect(await missedAtOf(started.id)).toBeNull()
    // A run made after the change carries the new grace.
    const later = await makeRun(t.db, { definition: fx, scope: 'l', scheduledFor: T })
    expect(await missedAtOf(later.id)).toEqual(at(600_000))
  })

  it('the sweep and the keyed claim agree at the boundary', async () => {
    const fx = await makeDefinition(t.db, { graceSeconds: 60 })
    const run = await makeRun(t.db, { definition: fx, scope: 'k', scheduledFor: T, concurrencyKey: 'k' })
    // At the instant itself the run may still start and is not missed...
    expect(await runs.findMissed(t.db, at(60_000))).toEqual([])
    // ...a millisecond later it is missed and may not start.
    expect((await runs.findMissed(t.db, at(60_001))).map((r) => r.id)).toEqual([run.id])
    const late = await runs.claimStart(t.db, run, 'me', at(90_000), at(60_001))
    expect(late.claimed).toBe(false)
    const inTime = await runs.claimStart(t.db, run, 'me', at(90_000), at(60_000))
    expect(inTime.claimed).toBe(true)
    expect(await missedAtOf(run.id)).toBeNull()
    expect(await runs.findMissed(t.db, at(3_600_000))).toEqual([])
  })

  it('a stamp left on a run that left scheduled is never answered', async () => {
    const fx = await makeDefinition(t.db, { graceSeconds: 0 })
    const run = await makeRun(t.db, { definition: fx, scope: 'x', scheduledFor: T })
    await t.db.run(`UPDATE event_runs SET status = 'completed', ended_at = NOW(3) WHERE id = ?`, [run.id])
    expect(await missedAtOf(run.id)).toEqual(T)
    expect(await runs.findMissed(t.db, at(1))).toEqual([])
  })

  it('the sweep marks the missed runs of many definitions, each by its own grace, past runs it must skip', async () => {
    // The range ends at now minus the smallest grace (10 s); the 600 s
    // definition's runs past 10 s are read and left, and so is a grace-exempt
    // run held past its time, and the next round goes on past them.
    const short = await makeDefinition(t.db, { graceSeconds: 10 })
    const long = await makeDefinition(t.db, { graceSeconds: 600 })
    const exempt = await makeRun(t.db, { definition: long, scope: 'exempt', scheduledFor: at(-3_600_000) })
    await t.db.run('UPDATE event_runs SET grace_exempt = 1, missed_at = NULL WHERE id = ?', [exempt.id])
    const expected: number[] = []
    const within: number[] = []
    for (let i = 0; i < 30; i++) {
      const s = await makeRun(t.db, { definition: short, scope: `s${i}`, scheduledFor: at(-60_000 - i) })
      expected.push(s.id)
      const l = await makeRun(t.db, { definition: long, scope: `l${i}`, scheduledFor: at(-60_000 - i) })
      within.push(l.id)
      const old = await makeRun(t.db, { definition: long, scope: `o${i}`, scheduledFor: at(-700_000 - i) })
      expected.push(old.id)
    }
    // Within the smallest grace, and ahead: outside the range altogether.
    await makeRun(t.db, { definition: short, scope: 'fresh', scheduledFor: at(-5_000) })
    await makeRun(t.db, { definition: short, scope: 'ahead', scheduledFor: at(60_000) })

    // Page by page as a sweep's rounds go (each marks what it found): the
    // rows skipped do not use up a page.
    const seen: number[] = []
    for (;;) {
      const page = await runs.findMissed(t.db, T, 7)
      if (page.length === 0) break
      expect(page.every((r) => r.status === 'scheduled' && r.missedAt !== null && r.missedAt < T)).toBe(true)
      seen.push(...page.map((r) => r.id))
      await runs.transitionMany(
        t.db,
        page.map((r) => r.id),
        'scheduled',
        'missed',
        { error: 'test' },
      )
    }
    const byId = (a: number, b: number) => a - b
    expect(seen.sort(byId)).toEqual([...expected].sort(byId))
    for (const id of [...within, exempt.id]) expect(await runs.statusOf(t.db, id)).toBe('scheduled')
  })
})

describe('the missed sweep of a tick (Housekeeping.markMissed)', () => {
  it('marks every run past its own grace across definitions, over more than one round of 500', async () => {
    const short = await makeDefinition(t.db, { graceSeconds: 0 })
    const long = await makeDefinition(t.db, { graceSeconds: 3600 })
    // 520 late runs of the short definition interleaved with 520 of the long
    // one that are as late but within their grace: a round of 500 holds both.
    const values: string[] = []
    for (let i = 0; i < 520; i++) {
      for (const [fx, scope] of [
        [short, 's'],
        [long, 'l'],
      ] as const) {
        values.push(
          `(${fx.def.id}, ${fx.version.id}, '${scope}${i}', '2030-01-01 11:50:00.000' - INTERVAL ${i} SECOND, 'UTC',
            '2030-01-01 11:50:00.000' - INTERVAL ${i} SECOND + INTERVAL ${fx === short ? 0 : 3600} SECOND)`,
        )
      }
    }
    await t.db.run(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, missed_at) VALUES ${values.join(', ')}`,
    )
    const noop = () => {}
    const hk = new Housekeeping({
      db: t.db,
      instanceId: 'test',
      logger: { info: noop, warn: noop, error: noop, debug: noop },
      horizonMs: 0,
      maxRunsAhead: 0,
      materialiseEveryMs: 0,
      logRetentionMs: 0,
      runRetentionMs: 0,
      auditRetentionMs: 0,
      retentionEveryMs: 0,
      reclaimEveryMs: 0,
      stopping: () => false,
    })
    const marked = await hk.markMissed(T)
    expect(marked).toHaveLength(520)
    const [counts] = await t.db.query<{ missed: number; scheduled: number }>(
      `SELECT SUM(status = 'missed') AS missed, SUM(status = 'scheduled') AS scheduled FROM event_runs`,
    )
    expect(Number(counts?.missed)).toBe(520)
    expect(Number(counts?.scheduled)).toBe(520)
    const [leftOver] = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs WHERE status = 'missed' AND definition_id <> ?`,
      [short.def.id],
    )
    expect(Number(leftOver?.n)).toBe(0)
  })
})

describe('the missed sweep’s plan', () => {
  it('is a range of idx_evrun_due that ends at now minus the smallest grace: runs ahead are not read', async () => {
    const fx = await makeDefinition(t.db, { graceSeconds: 30 })
    await t.db.run(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, missed_at)
       SELECT ?, ?, CONCAT('a', seq), ? + INTERVAL seq SECOND, 'UTC', ? + INTERVAL seq + 30 SECOND FROM seq_1_to_3000`,
      [fx.def.id, fx.version.id, T, T],
    )
    const late = await makeRun(t.db, { definition: fx, scope: 'late', scheduledFor: at(-60_000) })
    await t.db.run('ANALYZE TABLE event_runs')
    const sql = `EXPLAIN SELECT r.id FROM event_runs r FORCE INDEX (idx_evrun_due)
      WHERE r.status = 'scheduled'
        AND r.scheduled_for < ? - INTERVAL (SELECT MIN(d.grace_seconds) FROM event_definitions d) SECOND
        AND r.missed_at < ? ORDER BY r.scheduled_for, r.id LIMIT 500`
    const [plan] = await t.db.query<{ type: string; key: string; Extra: string }>(sql, [T, T])
    expect(plan).toMatchObject({ type: 'range', key: 'idx_evrun_due' })
    expect(plan?.Extra ?? '').not.toMatch(/filesort/)
    // Rows read, counted by the server on one connection: the late run, not the 3,000 ahead.
    const one = t.open({ connectionLimit: 1 })
    const handlerReads = async () =>
      (await one.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Handler_read%'")).reduce(
        (sum, r) => sum + Number(r.Value),
        0,
      )
    const before = await handlerReads()
    expect((await runs.findMissed(one, T, 500)).map((r) => r.id)).toEqual([late.id])
    expect((await handlerReads()) - before).toBeLessThan(10)
    expect((await runs.findMissed(t.db, T, 500)).map((r) => r.id)).toEqual([late.id])
  })
})
