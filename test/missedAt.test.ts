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

  it('a stray stamp on a run that left scheduled is answered once and can be cleared', async () => {
    const fx = await makeDefinition(t.db, { graceSeconds: 0 })
    const run = await makeRun(t.db, { definition: fx, scope: 'x', scheduledFor: T })
    await t.db.run(`UPDATE event_runs SET status = 'completed', ended_at = NOW(3) WHERE id = ?`, [run.id])
    const found = await runs.findMissed(t.db, at(1))
    expect(found.map((r) => [r.id, r.status])).toEqual([[run.id, 'completed']])
    expect(await runs.clearMissedAt(t.db, [run.id])).toBe(1)
    expect(await runs.findMissed(t.db, at(1))).toEqual([])
  })
})
