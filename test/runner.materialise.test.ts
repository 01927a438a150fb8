/**
 * Materialisation driven by the runner's own tick with a hand-moved clock:
 * exact UTC instants across both New York DST transitions, one run per
 * occurrence per scope, idempotent repeats, paused/archived definitions, and a
 * schedule change that cancels the runs the new schedule no longer produces.
 */
import { describe, expect, it } from 'vitest'
import * as definitionsSql from '../sql/eventDefinitions.ts'
import { setDefinitionState, updateDefinition } from '../src/operations/definitions.ts'
import { materialiseDefinition } from '../src/runner/materialise.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  definitionDeps,
  makeRegistry,
  program,
  type RunnerTestEnv,
  TestClock,
} from './helpers/runnerHarness.ts'

const HORIZON_MS = 6 * 3600_000
const LOG_ONLY = program(['main', [{ kind: 'core.log', params: { message: 'hi' } }]])

const t = useTestDb()

/** A definition that logs every half hour, New York time, in each of `scopes`. */
const halfHourlyInNewYork = (scopes: string[]) => ({
  schedule: '*/30 * * * *',
  timezone: 'America/New_York',
  scopes,
  program: LOG_ONLY,
})

function setup(start: string) {
  const clock = new TestClock(start)
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    clock,
    horizonMs: HORIZON_MS,
    instanceId: `mat-${start}`,
  })
  return { clock, env, runner }
}

interface Row {
  id: number
  scope: string
  at: string
  status: string
  version_id: number
  started_by: string
  last_error: string | null
}

async function runsOf(definitionId: number): Promise<Row[]> {
  const rows = await t.db.query<Record<string, unknown>>(
    `SELECT id, scope, scheduled_for, status, version_id, started_by, last_error FROM event_runs
      WHERE definition_id = ? ORDER BY scheduled_for, scope`,
    [definitionId],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    scope: String(r.scope),
    at: (r.scheduled_for as Date).toISOString(),
    status: String(r.status),
    version_id: Number(r.version_id),
    started_by: String(r.started_by),
    last_error: (r.last_error as string | null) ?? null,
  }))
}

const utc = (day: string, times: string[]) => times.map((hm) => `${day}T${hm}:00.000Z`)

/** Every (scope, instant) pair once, sorted like {@link runsOf}. */
function expected(instants: string[], scopes: string[]) {
  return instants.flatMap((at) => [...scopes].sort().map((scope) => ({ scope, at })))
}

describe('materialisation across DST (America/New_York, */30)', () => {
  it('spring forward: 02:00 and 02:30 (skipped) fire once, at 03:00 EDT = 07:00Z; one run per occurrence per scope', async () => {
    // 2027-03-14 02:00 EST → 03:00 EDT, i.e. 07:00Z. Clock at 23:10 EST the day before.
    const { env, runner } = setup('2027-03-14T04:10:00Z')
    const def = await defineEvent(env, halfHourlyInNewYork(['east', 'west']))
    await runner.tick()
    const rows = await runsOf(def.id)
    const instants = utc('2027-03-14', [
      '04:30',
      '05:00',
      '05:30', // 23:30 EST … 00:30 EST
      '06:00',
      '06:30', // 01:00, 01:30 EST
      '07:00', // 02:00 and 02:30 do not exist: both fire at the jump, together with 03:00 EDT, once
      '07:30',
      '08:00',
      '08:30',
      '09:00',
      '09:30',
      '10:00',
    ])
    expect(rows.map(({ scope, at }) => ({ scope, at }))).toEqual(expected(instants, ['east', 'west']))
    const current = await definitionsSql.getById(t.db, def.id)
    for (const r of rows) {
      expect(r).toMatchObject({
        status: 'scheduled',
        started_by: 'schedule',
        version_id: current?.currentVersionId,
      })
    }
  })

  it('fall back: the repeated 01:00 and 01:30 fire once, at their first (EDT) occurrence; a second pass writes nothing', async () => {
    // 2027-11-07 02:00 EDT → 01:00 EST, i.e. 06:00Z. Clock at 23:10 EDT the day before.
    const { env, runner, clock } = setup('2027-11-07T03:10:00Z')
    const def = await defineEvent(env, halfHourlyInNewYork(['east', 'west']))
    await runner.tick()
    const first = await runsOf(def.id)
    const instants = utc('2027-11-07', [
      '03:30',
      '04:00',
      '04:30', // 23:30, 00:00, 00:30 EDT
      '05:00',
      '05:30', // 01:00, 01:30 EDT (first occurrence)
      // 06:00Z and 06:30Z are 01:00 and 01:30 EST again: not fired
      '07:00',
      '07:30',
      '08:00',
      '08:30',
      '09:00', // 02:00 EST …
    ])
    expect(first.map(({ scope, at }) => ({ scope, at }))).toEqual(expected(instants, ['east', 'west']))
    const dup = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM (SELECT scope, scheduled_for FROM event_runs WHERE definition_id = ?
         GROUP BY scope, scheduled_for HAVING COUNT(*) > 1) d`,
      [def.id],
    )
    expect(Number(dup[0]?.n)).toBe(0)

    // A second pass (asked for explicitly, same clock) writes nothing…
    runner.requestMaterialise()
    await runner.tick()
    expect(await runsOf(def.id)).toEqual(first)
    // …and neither does one that ignores the watermark: the unique key makes a
    // repeated occurrence "already existed", not a duplicate and not an error.
    const fresh = await definitionsSql.getById(t.db, def.id)
    if (!fresh) throw new Error('definition vanished')
    await t.db.run('DELETE FROM schedule_watermarks WHERE definition_id = ?', [def.id])
    expect(
      (await materialiseDefinition(t.db, { ...fresh, materializedThrough: null }, clock.now(), HORIZON_MS))
        .created,
    ).toBe(0)
    // A second runner instance materialising the same horizon adds nothing either.
    const other = new Runner({
      db: t.db,
      registry: env.registry,
      clock,
      horizonMs: HORIZON_MS,
      instanceId: 'mat-other',
    })
    await t.db.run('UPDATE event_definitions SET materialized_through = NULL WHERE id = ?', [def.id])
    await t.db.run('DELETE FROM schedule_watermarks WHERE definition_id = ?', [def.id])
    await other.tick()
    expect(await runsOf(def.id)).toEqual(first)
  })
})

describe('definition state and schedule changes', () => {
  it('PAUSED and ARCHIVED definitions materialise nothing; pausing an active one stops new occurrences', async () => {
    const { env, runner, clock } = setup('2027-06-01T12:00:00Z')
    const base = halfHourlyInNewYork(['a', 'b'])
    const paused = await defineEvent(env, { ...base, state: 'paused' })
    const archived = await defineEvent(env, base)
    await setDefinitionState(definitionDeps(env), archived.id, 'archived', 'admin#test')
    const active = await defineEvent(env, base)
    await runner.tick()
    expect(await runsOf(paused.id)).toEqual([])
    expect(await runsOf(archived.id)).toEqual([])
    const before = await runsOf(active.id)
    expect(before).toHaveLength(12 * 2) // 6 h of half hours, two scopes

    await setDefinitionState(definitionDeps(env), active.id, 'paused', 'admin#test')
    clock.advance(2 * 3600_000)
    runner.requestMaterialise()
    await runner.tick()
    // No new occurrences for the extra two hours of horizon while paused.
    expect((await runsOf(active.id)).filter((r) => r.at > before.at(-1)!.at)).toEqual([])
    expect(await runsOf(paused.id)).toEqual([])

    // Back to ACTIVE: the horizon fills again.
    await setDefinitionState(definitionDeps(env), active.id, 'active', 'admin#test')
    runner.requestMaterialise()
    await runner.tick()
    expect(
      (await runsOf(active.id)).filter((r) => r.at > before.at(-1)!.at && r.status === 'scheduled'),
    ).toHaveLength(4 * 2)
  })

  it('a schedule change cancels future scheduled runs the new schedule no longer produces, and keeps the rest', async () => {
    const { env, runner, clock } = setup('2027-11-07T03:10:00Z')
    const def = await defineEvent(env, halfHourlyInNewYork(['east', 'west']))
    await runner.tick()
    const before = await runsOf(def.id)
    expect(before).toHaveLength(20)

    // Hourly instead of half-hourly (still across the fall-back night).
    await updateDefinition(definitionDeps(env), def.id, { schedule: '0 * * * *' }, 'admin#test')
    runner.requestMaterialise()
    await runner.tick()
    const after = await runsOf(def.id)
    // The same rows: nothing re-created, nothing added (hourly ⊂ half-hourly here).
    expect(after.map((r) => r.id)).toEqual(before.map((r) => r.id))
    const kept = after.filter((r) => r.status === 'scheduled')
    const cancelled = after.filter((r) => r.status === 'cancelled')
    expect(kept.map(({ scope, at }) => ({ scope, at }))).toEqual(
      // 00:00, 01:00 EDT, then 02:00, 03:00, 04:00 EST; 01:00 EST (06:00Z) is the repeat, never fired
      expected(utc('2027-11-07', ['04:00', '05:00', '07:00', '08:00', '09:00']), ['east', 'west']),
    )
    expect(cancelled.map(({ scope, at }) => ({ scope, at }))).toEqual(
      expected(utc('2027-11-07', ['03:30', '04:30', '05:30', '07:30', '08:30']), ['east', 'west']),
    )
    for (const r of cancelled) expect(r.last_error).toMatch(/schedule changed/)

    // Moving the horizon on adds only hourly occurrences.
    clock.advance(3600_000)
    runner.requestMaterialise()
    await runner.tick()
    const added = (await runsOf(def.id)).filter((r) => !before.some((b) => b.id === r.id))
    expect(added.map(({ scope, at }) => ({ scope, at }))).toEqual(
      expected(utc('2027-11-07', ['10:00']), ['east', 'west']),
    )
  })
})
