/**
 * Materialising runs against a real MariaDB: invariant 1 of docs/contract.md. Every test starts
 * from empty run tables (definitions stay), because findDue / findMissed / list span every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { NewRun } from '../sql/eventRuns/index.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as versions from '../sql/eventVersions.ts'
import { useTestDb } from './helpers/db.ts'
import { ids } from './helpers/eventRuns.ts'
import { at, countRows, makeDefinition, makeRun, newRun, resetRuns } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

describe('invariant 1: materialisation is idempotent and pins the version', () => {
  it('a second materialise of one occurrence answers null and writes nothing; findOccurrence finds the first', async () => {
    const fx = await makeDefinition(db)
    const spec = newRun(fx, { scope: 'eu', scheduledFor: at(3_600_000), params: { a: 1 } })
    const first = await runs.materialise(db, spec)
    expect(first).toEqual(expect.any(Number))
    const before = await countRows(db, 'event_runs')
    const again = await runs.materialise(db, { ...spec, params: { a: 2 }, startedBy: 'someone-else' })
    expect(again).toBeNull()
    expect(await countRows(db, 'event_runs')).toBe(before)
    const found = await runs.findOccurrence(db, fx.def.id, 'eu', spec.scheduledFor)
    expect(found?.id).toBe(first)
    // The losing write changed nothing on the existing row.
    expect(found?.params).toEqual({ a: 1 })
    expect(found?.startedBy).toBe('schedule')
    // Another scope of the same instant is another occurrence.
    expect(await runs.materialise(db, { ...spec, scope: 'us' })).toEqual(expect.any(Number))
    expect(await countRows(db, 'event_runs')).toBe(before + 1)
    expect(await runs.findOccurrence(db, fx.def.id, 'apac', spec.scheduledFor)).toBeNull()
  })

  it('the run pins the version id it was materialised with, not a later one', async () => {
    const fx = await makeDefinition(db)
    const id1 = await runs.materialise(db, newRun(fx, { scheduledFor: at(60_000) }))
    const v2 = await versions.publish(db, fx.def.id, { phases: [] }, 'test')
    expect(v2.version).toBe(2)
    const id2 = await runs.materialise(db, newRun(fx, { versionId: v2.id, scheduledFor: at(120_000) }))
    const r1 = await runs.getById(db, id1 as number)
    const r2 = await runs.getById(db, id2 as number)
    expect(r1?.versionId).toBe(fx.version.id)
    expect(r1?.versionNumber).toBe(1)
    expect(r2?.versionId).toBe(v2.id)
    expect(r2?.versionNumber).toBe(2)
  })

  it('materialiseMany counts only the rows that were new', async () => {
    const fx = await makeDefinition(db)
    const existing = newRun(fx, { scope: '', scheduledFor: at(60_000) })
    expect(await runs.materialise(db, existing)).not.toBeNull()
    const a = newRun(fx, { scope: '', scheduledFor: at(120_000) })
    const b = newRun(fx, { scope: '', scheduledFor: at(180_000) })
    // `existing` is already there and `a` appears twice in the batch.
    expect(await runs.materialiseMany(db, [existing, a, b, { ...a }])).toBe(2)
    expect(await countRows(db, 'event_runs')).toBe(3)
    expect(await runs.materialiseMany(db, [existing, a, b])).toBe(0)
    expect(await runs.materialiseMany(db, [])).toBe(0)
    expect(await countRows(db, 'event_runs')).toBe(3)
  })

  it('materialiseMany writes every run as materialise does, ids in the order given, each grace its own', async () => {
    const short = await makeDefinition(db, { graceSeconds: 45 })
    const long = await makeDefinition(db, { graceSeconds: 7200, concurrencyKey: 'stage-{{scope}}' })
    const when = new Date(Date.UTC(2031, 4, 6, 7, 8, 9, 123))
    const specs: Array<(scope: string) => NewRun> = [
      (scope) => newRun(long, { scope, scheduledFor: when, concurrencyKey: 'stage-a', overlap: 'skip' }),
      (scope) => newRun(short, { scope, scheduledFor: when, params: { n: 1, s: 'it\'s "quoted"' } }),
      (scope) => newRun(short, { scope, scheduledFor: new Date(when.getTime() + 1), graceExempt: true }),
      (scope) => newRun(long, { scope, scheduledFor: when, rehearsal: true, startedBy: null }),
      (scope) => newRun(short, { scope, scheduledFor: when, timezone: 'Europe/Paris', startedBy: 'ann' }),
      (scope) => newRun(long, { scope, scheduledFor: new Date(when.getTime() + 999), concurrencyKey: null }),
    ]
    const columns = `definition_id, version_id, scheduled_for, timezone, concurrency_key, params, rehearsal,
      started_by, wake_at, overlap, grace_exempt, missed_at, status`
    const read = (scopes: string[]) =>
      db.query<Record<string, unknown>>(
        `SELECT id, scope, ${columns} FROM event_runs WHERE scope IN (${scopes.map(() => '?').join(', ')}) ORDER BY id`,
        scopes,
      )
    // One by one, the reference.
    const one = specs.map((_, i) => `one-${i}`)
    for (const [i, spec] of specs.entries())
      expect(await runs.materialise(db, spec(one[i] as string))).not.toBeNull()
    // All at once, the definitions interleaved: the ids follow the input, not the join.
    const many = specs.map((_, i) => `many-${i}`)
    expect(
      await runs.materialiseMany(
        db,
        specs.map((spec, i) => spec(many[i] as string)),
      ),
    ).toBe(specs.length)

    const strip = ({ id: _id, scope: _scope, ...rest }: Record<string, unknown>) => rest
    const oneRows = await read(one)
    const manyRows = await read(many)
    expect(manyRows.map((r) => r.scope)).toEqual(many)
    expect(manyRows.map(strip)).toEqual(oneRows.map(strip))
    // The graces are each definition's own, to the millisecond, and none for the exempt run.
    const missed = manyRows.map((r) => (r.missed_at as Date | null)?.getTime() ?? null)
    expect(missed).toEqual([
      when.getTime() + 7_200_000,
      when.getTime() + 45_000,
      null,
      when.getTime() + 7_200_000,
      when.getTime() + 45_000,
      when.getTime() + 999 + 7_200_000,
    ])
    const idsInOrder = manyRows.map((r) => Number(r.id))
    expect([...idsInOrder].sort((a, b) => a - b)).toEqual(idsInOrder)
  })

  it("materialiseMany reads the committed grace, not its transaction's older snapshot", async () => {
    const fx = await makeDefinition(db, { graceSeconds: 60 })
    const when = new Date(Date.UTC(2031, 0, 2))
    await db.transaction(async (tx) => {
      // A plain read first: the transaction's snapshot now predates the change below.
      const [before] = await tx.query<{ g: number }>(
        'SELECT grace_seconds AS g FROM event_definitions WHERE id = ?',
        [fx.def.id],
      )
      expect(Number(before?.g)).toBe(60)
      // Another connection changes the grace and commits.
      await db.run('UPDATE event_definitions SET grace_seconds = 120 WHERE id = ?', [fx.def.id])
      const [still] = await tx.query<{ g: number }>(
        'SELECT grace_seconds AS g FROM event_definitions WHERE id = ?',
        [fx.def.id],
      )
      expect(Number(still?.g)).toBe(60)
      expect(await runs.materialiseMany(tx, [newRun(fx, { scope: 'snap', scheduledFor: when })])).toBe(1)
    })
    const [row] = await db.query<{ missed_at: Date }>('SELECT missed_at FROM event_runs WHERE scope = ?', [
      'snap',
    ])
    expect(row?.missed_at.getTime()).toBe(when.getTime() + 120_000)
  })

  it('materialiseMany reads a grace changed before it in the same transaction', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 60 })
    const when = new Date(Date.UTC(2031, 0, 1))
    await db.transaction(async (tx) => {
      await tx.run('UPDATE event_definitions SET grace_seconds = 90 WHERE id = ?', [fx.def.id])
      expect(await runs.materialiseMany(tx, [newRun(fx, { scope: 'g', scheduledFor: when })])).toBe(1)
    })
    const [row] = await db.query<{ missed_at: Date }>('SELECT missed_at FROM event_runs WHERE scope = ?', [
      'g',
    ])
    expect(row?.missed_at.getTime()).toBe(when.getTime() + 90_000)
  })

  it('a rehearsal never stores a concurrency key (materialise and materialiseMany)', async () => {
    const fx = await makeDefinition(db, { concurrencyKey: 'stage-1' })
    const id = await runs.materialise(db, newRun(fx, { rehearsal: true, concurrencyKey: 'stage-1' }))
    expect(await runs.materialiseMany(db, [newRun(fx, { rehearsal: true, concurrencyKey: 'stage-1' })])).toBe(
      1,
    )
    const real = await runs.materialise(db, newRun(fx, { concurrencyKey: 'stage-1' }))
    const rows = await db.query<{ id: number; concurrency_key: string | null; rehearsal: number }>(
      'SELECT id, concurrency_key, rehearsal FROM event_runs ORDER BY id',
    )
    const byId = new Map(rows.map((r) => [Number(r.id), r]))
    expect(byId.get(id as number)?.concurrency_key).toBeNull()
    expect(Number(byId.get(id as number)?.rehearsal)).toBe(1)
    expect(rows.filter((r) => Number(r.rehearsal) === 1).every((r) => r.concurrency_key === null)).toBe(true)
    expect(rows.filter((r) => Number(r.rehearsal) === 1)).toHaveLength(2)
    expect(byId.get(real as number)?.concurrency_key).toBe('stage-1')
  })

  it('a new run is due at its scheduled instant (key-less: by scheduled_for, wake_at NULL; keyed: wake_at = scheduled_for)', async () => {
    const when = at(5_000)
    const run = await makeRun(db, { scheduledFor: when, concurrencyKey: null })
    expect(run.wakeAt).toBeNull()
    expect(run.status).toBe('scheduled')
    const keyed = await makeRun(db, { scheduledFor: at(1, when), concurrencyKey: 'stage' })
    expect(keyed.wakeAt?.getTime()).toBe(at(1, when).getTime())
    expect(ids(await runs.findDue(db, at(-1, when)))).toEqual([])
    expect(ids(await runs.findDue(db, when))).toEqual([run.id])
    expect(ids(await runs.findDue(db, at(1, when)))).toEqual([run.id, keyed.id])
  })
})
