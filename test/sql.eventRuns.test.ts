/**
 * sql/eventRuns/ against a real MariaDB: the invariants of docs/contract.md, 1–5, 7–12, 14 and
 * the no-starvation due query. Every test starts from empty run tables
 * (definitions stay), because findDue / findMissed / list span every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import type { NewRun, RunRow } from '../sql/eventRuns/index.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import * as versions from '../sql/eventVersions.ts'
import { listRuns } from '../sql/runPage.ts'
import type { RunStatus } from '../sql/states.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import {
  at,
  countRows,
  type DefinitionFixture,
  locks,
  makeDefinition,
  makeRun,
  newRun,
  rawRun,
  resetRuns,
  sleepMs,
  stepSpecs,
} from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

const LEASE = () => at(60_000)

/** Claim a scheduled run and move it to `running`, keeping `owner`'s lease. */
async function startRunning(run: { id: number; concurrencyKey: string | null }, owner = 'w1'): Promise<void> {
  const c = await runs.claimStart(db, run, owner, LEASE())
  expect(c).toEqual({ claimed: true, blockedBy: null })
  expect(await runs.transition(db, run.id, 'starting', 'running')).toBe(true)
}

/** A `running` run with no lease and wake_at now (as after releaseClaim). */
async function runningUnleased(run: { id: number; concurrencyKey: string | null }): Promise<void> {
  await startRunning(run, 'setup')
  expect(await runs.releaseClaim(db, run.id, 'setup')).toBe(true)
}

const ids = (rows: readonly { id: number }[]) => rows.map((r) => r.id)

/** `db`, but a lease's UPDATE is followed at once by a person waking `runId` (a cue answered between lease and read). */
function wakingAfterLease(runId: number, now: Date): Db {
  return new Proxy(db, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver)
      if (prop !== 'run') return typeof value === 'function' ? value.bind(target) : value
      return async (sql: string, args: unknown[]) => {
        const res = await target.run(sql, args as never)
        if (/SET claimed_by = \?, claim_token = \?/.test(sql))
          expect(await runs.wakeNow(target, runId, now)).toBe(true)
        return res
      }
    },
  })
}

let leaseSeq = 0
/** The runner's lease of due in-flight runs (claimTickBatch); true when it took `id`. */
async function leases(id: number, owner: string, leaseUntil: Date, now: Date): Promise<boolean> {
  const taken = await runs.claimTickBatch(db, owner, `tok-${owner}-${++leaseSeq}`, leaseUntil, now, 500)
  return taken.some((r) => r.id === id)
}

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

describe('invariant 2: claims are compare-and-set', () => {
  it('claimStart moves scheduled → starting once; every later claim answers false', async () => {
    const run = await makeRun(db)
    const lease = LEASE()
    expect(await runs.claimStart(db, run, 'w1', lease)).toEqual({ claimed: true, blockedBy: null })
    expect(await runs.claimStart(db, run, 'w1', LEASE())).toEqual({ claimed: false, blockedBy: null })
    expect(await runs.claimStart(db, run, 'w2', LEASE())).toEqual({ claimed: false, blockedBy: null })
    const row = await runs.getById(db, run.id)
    expect(row?.status).toBe('starting')
    expect(row?.claimedBy).toBe('w1')
    // The expiry is on the database's clock (NOW(3) + 60 s); wake_at on the caller's.
    expect(Math.abs((row?.claimExpiresAt?.getTime() ?? 0) - lease.getTime())).toBeLessThan(1000)
    // The lease moves wake_at, so a crashed owner's run comes due at expiry.
    expect(row?.wakeAt?.getTime()).toBe(lease.getTime())
    expect(row?.startedAt).toBeInstanceOf(Date)
  })

  it('claimStart through the key-less path cannot start a keyed run', async () => {
    const run = await makeRun(db, { concurrencyKey: 'k' })
    expect(await runs.claimStart(db, { id: run.id, concurrencyKey: null }, 'w1', LEASE())).toEqual({
      claimed: false,
      blockedBy: null,
    })
    expect(await runs.statusOf(db, run.id)).toBe('scheduled')
    expect((await locks(db)).size).toBe(0)
  })

  it('claimTickBatch leases a due in-flight run without changing its status', async () => {
    const run = await makeRun(db)
    await runningUnleased(run)
    const now = new Date()
    const lease = at(30_000, now)
    expect(await leases(run.id, 'w2', lease, now)).toBe(true)
    const row = await runs.getById(db, run.id)
    expect(row?.status).toBe('running')
    expect(row?.claimedBy).toBe('w2')
    expect(Math.abs((row?.claimExpiresAt?.getTime() ?? 0) - lease.getTime())).toBeLessThan(1000)
    expect(row?.wakeAt?.getTime()).toBe(lease.getTime())
  })

  it("renewClaims answers every run still the caller's, in one statement when all are, in two when one was taken over", async () => {
    const base = Date.now()
    const mine = [
      await makeRun(db, { scheduledFor: at(-2_000, base) }),
      await makeRun(db, { scheduledFor: at(-1_000, base) }),
    ]
    const lost = await makeRun(db, { scheduledFor: at(-3_000, base) })
    for (const r of [...mine, lost]) await startRunning(r, 'w1')
    let statements = 0
    const counted = wrapStatements(
      wrapStatements(db, 'runQuery', (real) => (sql, params) => {
        statements++
        return real(sql, params)
      }),
      'query',
      (real) => (sql, params) => {
        statements++
        return real(sql, params)
      },
    )
    const now = new Date()
    const renewed = await runs.renewClaims(counted, ids(mine), 'w1', at(45_000, now), now)
    expect([...renewed].sort((a, b) => a - b)).toEqual(ids(mine).sort((a, b) => a - b))
    expect(statements).toBe(1)
    for (const r of mine) {
      const row = await runs.getById(db, r.id)
      expect(Math.abs((row?.claimExpiresAt?.getTime() ?? 0) - at(45_000, now).getTime())).toBeLessThan(1000)
    }
    // Taken over by another owner (its lease ran out): not renewed, not answered, found by a second read.
    await db.run(`UPDATE event_runs SET claimed_by = 'w2' WHERE id = ?`, [lost.id])
    statements = 0
    const again = await runs.renewClaims(counted, [...ids(mine), lost.id], 'w1', at(50_000, now), now)
    expect([...again].sort((a, b) => a - b)).toEqual(ids(mine).sort((a, b) => a - b))
    expect(statements).toBe(2)
    expect((await runs.getById(db, lost.id))?.claimedBy).toBe('w2')
  })

  it('claimTickBatch refuses scheduled, paused and terminal runs (a paused run is never advanced)', async () => {
    const scheduled = await makeRun(db)
    const paused = await makeRun(db)
    await runningUnleased(paused)
    expect(await runs.transition(db, paused.id, 'running', 'paused')).toBe(true)
    const done = await makeRun(db)
    await runningUnleased(done)
    expect(await runs.transition(db, done.id, 'running', 'completed')).toBe(true)
    const now = new Date()
    for (const r of [scheduled, paused, done]) {
      expect(await leases(r.id, 'w1', at(30_000, now), at(3_600_000, now))).toBe(false)
    }
    expect(await runs.claimTickBatch(db, 'w1', 'tok-x', at(30_000, now), at(3_600_000, now), 100)).toEqual([])
    expect(ids(await runs.findDue(db, at(3_600_000, now), 500))).toEqual([scheduled.id])
  })

  it('lockDueToStart locks due key-less scheduled runs oldest first and skips rows another start holds; markStarted moves them on', async () => {
    const fx = await makeDefinition(db)
    const base = Date.now()
    const due: number[] = []
    for (let i = 0; i < 6; i++)
      due.push((await makeRun(db, { definition: fx, scheduledFor: at(-10_000 + i, base) })).id)
    const keyed = await makeRun(db, { definition: fx, concurrencyKey: 'k', scheduledFor: at(-20_000, base) })
    const future = await makeRun(db, { definition: fx, scheduledFor: at(60_000, base) })
    // In flight with an expired lease (due again): claimTickBatch's business, not a start's.
    const crashed = await makeRun(db, { definition: fx, scheduledFor: at(-30_000, base) })
    expect((await runs.claimStart(db, crashed, 'dead', at(-5_000, base), new Date(base))).claimed).toBe(true)
    const now = new Date(base)
    const lease = at(30_000, base)

    // Two start transactions open at once, as two instances would have them.
    let second: number[] = []
    const first = await db.transaction(
      async (a) => {
        const mine = await runs.lockDueToStart(a, now, 4)
        expect(ids(mine)).toEqual(due.slice(0, 4)) // oldest wake first
        second = await db.transaction(
          async (b) => {
            // A's rows are passed over, not waited on.
            const rows = await runs.lockDueToStart(b, now, 100)
            expect(await runs.markStarted(b, ids(rows), { status: 'completed', phase: 'main' })).toBe(
              rows.length,
            )
            return ids(rows)
          },
          { isolation: 'READ COMMITTED' },
        )
        const as = {
          status: 'running',
          phase: 'main',
          owner: 'A',
          token: 'tok-A',
          leaseUntil: lease,
          leaseMs: 30_000,
        } as const
        expect(await runs.markStarted(a, ids(mine), as)).toBe(4)
        return ids(mine)
      },
      { isolation: 'READ COMMITTED' },
    )
    expect(second).toEqual(due.slice(4))
    for (const id of first) {
      const r = await runs.getById(db, id)
      expect(r).toMatchObject({
        status: 'running',
        currentPhase: 'main',
        claimedBy: 'A',
        claimToken: 'tok-A',
      })
      expect(r?.startedAt).not.toBeNull()
      expect(r?.wakeAt?.getTime()).toBe(lease.getTime())
    }
    for (const id of second) {
      const r = await runs.getById(db, id)
      expect(r).toMatchObject({ status: 'completed', claimedBy: null, wakeAt: null })
      expect(r?.endedAt).not.toBeNull()
    }
    // Nothing is left to lock; the keyed, the future and the in-flight runs were not touched.
    expect(await db.transaction((tx) => runs.lockDueToStart(tx, now, 100))).toEqual([])
    for (const r of [keyed, future]) expect(await runs.statusOf(db, r.id)).toBe('scheduled')
    expect(await runs.getById(db, crashed.id)).toMatchObject({ status: 'starting', claimedBy: 'dead' })
    // The move is guarded: a run no longer scheduled does not move again.
    expect(
      await db.transaction((tx) => runs.markStarted(tx, first, { status: 'completed', phase: null })),
    ).toBe(0)
  })

  it('lockDueToStart walks on past a place in the due order, and markStarted moves a mixed set of ids exactly', async () => {
    const fx = await makeDefinition(db)
    const base = Date.now()
    // Due in this order: three at one instant (by id), then two later ones.
    const due: number[] = []
    for (const offset of [-10_000, -10_000, -10_000, -5_000, -4_000])
      due.push((await makeRun(db, { definition: fx, scheduledFor: at(offset, base) })).id)
    const now = new Date(base)
    const place = async (id: number) => {
      const r = await runs.getById(db, id)
      return { scheduledFor: r!.scheduledFor, id }
    }
    const lockAfter = (after?: runs.DuePlace) =>
      db.transaction(async (tx) => ids(await runs.lockDueToStart(tx, now, 100, after)))
    expect(await lockAfter()).toEqual(due)
    // Past the second run: the third shares its instant (a later id), the rest come after it.
    expect(await lockAfter(await place(due[1]!))).toEqual(due.slice(2))
    expect(await lockAfter(await place(due[3]!))).toEqual(due.slice(4))
    expect(await lockAfter(await place(due[4]!))).toEqual([])

    // Moved by ranges and loose ids together, and by nothing else: the
    // neighbours of each range (one of them due) stay where they are.
    const more: number[] = []
    for (let i = 0; i < 12; i++)
      more.push((await makeRun(db, { definition: fx, scheduledFor: at(-1_000, base) })).id)
    const chosen = [...more.slice(1, 7), more[8]!, more[10]!, due[0]!]
    const moved = await db.transaction(async (tx) => {
      await runs.lockDueToStart(tx, now, 100)
      return runs.markStarted(tx, [...chosen].reverse(), { status: 'completed', phase: 'main' })
    })
    expect(moved).toBe(chosen.length)
    for (const id of [...more, ...due])
      expect(await runs.statusOf(db, id)).toBe(chosen.includes(id) ? 'completed' : 'scheduled')
  })

  it('a key-less start is stamped started at its lock (its claim), not at the UPDATE that ends it', async () => {
    const fx = await makeDefinition(db)
    const run = await makeRun(db, { definition: fx, scheduledFor: at(-1_000) })
    const lockedAt = await db.transaction(async (tx) => {
      const [locked] = await runs.lockDueToStart(tx, new Date(), 10)
      expect(locked?.id).toBe(run.id)
      // The work of the start (step rows, pure steps, log lines) takes its time.
      await tx.query('SELECT SLEEP(0.2)')
      await runs.markStarted(
        tx,
        [run.id],
        { status: 'completed', phase: 'main' },
        { startedAt: locked!.lockedAt },
      )
      return locked!.lockedAt
    })
    const r = await runs.getById(db, run.id)
    expect(r?.startedAt?.getTime()).toBe(lockedAt.getTime())
    expect(r!.endedAt!.getTime() - lockedAt.getTime()).toBeGreaterThanOrEqual(190)
    // Without a lock time, the UPDATE's own.
    const other = await makeRun(db, { definition: fx, scheduledFor: at(-1_000) })
    const before = Date.now()
    await db.transaction(async (tx) => {
      await runs.lockDueToStart(tx, new Date(), 10)
      await runs.markStarted(tx, [other.id], { status: 'completed', phase: 'main' })
    })
    expect((await runs.getById(db, other.id))?.startedAt?.getTime()).toBeGreaterThanOrEqual(before - 50)
  })

  it('claimTickBatch leases due in-flight runs by token, skipping live leases, and answers only the caller’s rows', async () => {
    const fx = await makeDefinition(db)
    const free: number[] = []
    for (let i = 0; i < 3; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      free.push(r.id)
    }
    const leased = await makeRun(db, { definition: fx })
    await startRunning(leased, 'other') // live 60 s lease
    const sleeping = await makeRun(db, { definition: fx })
    await startRunning(sleeping, 'setup')
    expect(await runs.releaseClaim(db, sleeping.id, 'setup', { wakeAt: at(3_600_000) })).toBe(true)

    const now = at(1000)
    const lease = at(30_000, now)
    const mine = await runs.claimTickBatch(db, 'A', 'tick-A', lease, now, 100)
    expect(ids(mine).sort((x, y) => x - y)).toEqual(free)
    for (const r of mine) expect(r).toMatchObject({ status: 'running', claimedBy: 'A', claimToken: 'tick-A' })
    expect(await runs.claimTickBatch(db, 'B', 'tick-B', lease, now, 100)).toEqual([])
    expect((await runs.getById(db, leased.id))?.claimedBy).toBe('other')
    expect((await runs.getById(db, sleeping.id))?.claimedBy).toBeNull()
  })
  it('claimTickBatch reads what it leased on the range wake_at = its lease of idx_evrun_wake: claim_token has no index', async () => {
    const fx = await makeDefinition(db)
    const first: number[] = []
    for (let i = 0; i < 2; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      first.push(r.id)
    }
    const now = at(1000)
    const lease = at(30_000, now)
    expect(ids(await runs.claimTickBatch(db, 'A', 'lease-A', lease, now, 100)).sort((x, y) => x - y)).toEqual(
      first,
    )
    // Due after A's lease, and leased by B at the very same instant: both batches share wake_at.
    const later = await makeRun(db, { definition: fx })
    await runningUnleased(later)
    const b = await runs.claimTickBatch(db, 'B', 'lease-B', lease, now, 100)
    expect(ids(b)).toEqual([later.id])
    expect(b[0]).toMatchObject({ claimedBy: 'B', claimToken: 'lease-B' })
    const [plan] = await db.query<{ key: string | null; type: string }>(
      'EXPLAIN SELECT r.id FROM event_runs r FORCE INDEX (idx_evrun_wake) WHERE r.wake_at = ? AND r.claim_token = ? ORDER BY r.id',
      [lease, 'lease-B'],
    )
    expect(plan?.key).toBe('idx_evrun_wake')
    expect(plan?.type).toBe('ref')
    const indexes = await db.query<{ Key_name: string }>('SHOW INDEX FROM event_runs')
    expect(indexes.map((i) => i.Key_name)).not.toContain('idx_evrun_claim_token')
    // Nor the version's foreign key and its index (migration 0018): no statement reads runs by version.
    expect(indexes.map((i) => i.Key_name)).not.toContain('fk_evrun_version')
  })

  it('claimTickBatch still answers a run woken between its lease and its read (a cue answered then)', async () => {
    const fx = await makeDefinition(db)
    const both: number[] = []
    for (let i = 0; i < 2; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      both.push(r.id)
    }
    const now = at(1000)
    // The lease's UPDATE goes through; then, before the read, a cue answer wakes one of its runs.
    const racing = wakingAfterLease(both[1] as number, now)
    const mine = await runs.claimTickBatch(racing, 'A', 'lease-woken', at(30_000, now), now, 100)
    expect(ids(mine).sort((x, y) => x - y)).toEqual(both)
    expect(mine.every((r) => r.claimToken === 'lease-woken')).toBe(true)
  })

  it('claimTickBatchWithSteps reads each leased run with the step nextSteps names, null when none is left, a starting run left out', async () => {
    const fx = await makeDefinition(db)
    // Three runs in flight: one at its first step, one past two of three, one with every step done.
    const made: { id: number; concurrencyKey: string | null }[] = []
    for (let i = 0; i < 3; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      await steps.expand(db, [{ runId: r.id, specs: stepSpecs(3) }])
      made.push(r)
    }
    const [, partly, done] = made as [RunRow, RunRow, RunRow]
    await db.run(`UPDATE event_run_steps SET status = 'completed' WHERE run_id = ? AND seq < 2`, [partly.id])
    await db.run(`UPDATE event_run_steps SET status = 'completed' WHERE run_id = ?`, [done.id])
    // A run starting has no steps yet: left out (the lane reads its steps after the expansion).
    const starting = await makeRun(db, { definition: fx })
    await runs.claimStart(db, starting, 'setup', LEASE())
    await db.run(
      'UPDATE event_runs SET claimed_by = NULL, claim_expires_at = NULL, wake_at = ? WHERE id = ?',
      [at(-1000), starting.id],
    )

    const now = at(1000)
    let read: { sql: string; args: unknown[] } | null = null
    const recorded = new Proxy(db, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver)
        if (prop !== 'execute') return typeof value === 'function' ? value.bind(target) : value
        return (sql: string, args: unknown[]) => {
          read ??= { sql, args }
          return target.execute(sql, args as never)
        }
      },
    })
    const { runs: leased, nextSteps } = await runs.claimTickBatchWithSteps(
      recorded,
      'A',
      'lease-steps',
      at(30_000, now),
      now,
      100,
    )
    const all = [...made.map((r) => r.id), starting.id].sort((x, y) => x - y)
    expect(ids(leased)).toEqual(all)
    expect(leased.every((r) => r.claimToken === 'lease-steps' && r.definitionSlug !== '')).toBe(true)
    const expected = await steps.nextSteps(db, all)
    for (const id of all) expect(nextSteps.get(id) ?? null).toEqual(expected.get(id) ?? null)
    expect(nextSteps.get(partly.id)?.seq).toBe(2)
    expect(nextSteps.get(made[0]?.id as number)?.seq).toBe(0)
    expect(nextSteps.has(done.id) && nextSteps.get(done.id)).toBe(null)
    expect(nextSteps.has(starting.id)).toBe(false)
    // One statement, each table by an index: the lease's range of idx_evrun_wake, each run's steps by its key.
    const captured = read as { sql: string; args: unknown[] } | null
    expect(captured?.sql).toMatch(/LEFT JOIN event_run_steps s/)
    const plan = await db.query<{ table: string; type: string; key: string | null }>(
      `EXPLAIN ${captured?.sql}`,
      captured?.args as never,
    )
    const byTable = Object.fromEntries(plan.map((p) => [p.table, `${p.type} ${p.key}`]))
    expect(byTable).toMatchObject({
      r: 'ref idx_evrun_wake',
      s: expect.stringMatching(/^(eq_ref|ref) uq_evstep_run_seq$/),
      n: expect.stringMatching(/^(ref|range) uq_evstep_run_seq$/),
    })
  })

  it('keepClaims keeps a held claim alive, never shortens it, keeps a woken run early and leaves others alone', async () => {
    const fx = await makeDefinition(db)
    const made: number[] = []
    for (let i = 0; i < 4; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      made.push(r.id)
    }
    const [short, long, woken, theirs] = made as [number, number, number, number]
    const now = new Date()
    expect(await leases(short, 'A', at(2_000, now.getTime()), now)).toBe(true)
    const lease = async (id: number) =>
      (
        await db.query<{ e: Date; w: Date | null }>(
          'SELECT claim_expires_at AS e, wake_at AS w FROM event_runs WHERE id = ?',
          [id],
        )
      )[0] as { e: Date; w: Date | null }
    // Leased by A now, with 2 s, 60 s, 2 s; the last by B.
    await db.run(
      'UPDATE event_runs SET claimed_by = ?, claim_expires_at = NOW(3) + INTERVAL ? SECOND, wake_at = ? WHERE id = ?',
      ['A', 60, at(60_000, now.getTime()), long],
    )
    await db.run(
      'UPDATE event_runs SET claimed_by = ?, claim_expires_at = NOW(3) + INTERVAL 2 SECOND, wake_at = ? WHERE id = ?',
      ['A', at(2_000, now.getTime()), woken],
    )
    await db.run(
      'UPDATE event_runs SET claimed_by = ?, claim_expires_at = NOW(3) + INTERVAL 2 SECOND, wake_at = ? WHERE id = ?',
      ['B', at(2_000, now.getTime()), theirs],
    )
    // A person wakes one of A's held runs.
    expect(await runs.wakeNow(db, woken, now)).toBe(true)
    const before = { long: await lease(long), theirs: await lease(theirs), woken: await lease(woken) }

    const until = at(10_000, now.getTime())
    expect(await runs.keepClaims(db, [short, long, woken, theirs], 'A', until, now)).toBe(3)
    const kept = await lease(short)
    expect(kept.w?.getTime()).toBe(until.getTime())
    expect(kept.e.getTime()).toBeGreaterThanOrEqual(Date.now() + 8_000)
    // The longer lease stands; B's claim is B's; the woken run is still due now.
    expect(await lease(long)).toEqual(before.long)
    expect(await lease(theirs)).toEqual(before.theirs)
    expect((await lease(woken)).w?.getTime()).toBe(before.woken.w?.getTime())
    expect((await lease(woken)).e.getTime()).toBeGreaterThanOrEqual(Date.now() + 8_000)
  })

  it('claimTickBatchWithSteps still answers a run woken between its lease and its read', async () => {
    const fx = await makeDefinition(db)
    const both: number[] = []
    for (let i = 0; i < 2; i++) {
      const r = await makeRun(db, { definition: fx })
      await runningUnleased(r)
      await steps.expand(db, [{ runId: r.id, specs: stepSpecs(1) }])
      both.push(r.id)
    }
    const now = at(1000)
    const racing = wakingAfterLease(both[1] as number, now)
    const { runs: mine, nextSteps } = await runs.claimTickBatchWithSteps(
      racing,
      'A',
      'lease-woken-steps',
      at(30_000, now),
      now,
      100,
    )
    expect(ids(mine).sort((x, y) => x - y)).toEqual(both)
    for (const id of both) expect(nextSteps.get(id)?.seq).toBe(0)
  })
})

describe('invariant 3: a live lease is not re-enterable', () => {
  it('the same owner is refused until the lease expires (on the database clock), then succeeds', async () => {
    const run = await makeRun(db)
    await runningUnleased(run)
    const t0 = Date.now()
    expect(await leases(run.id, 'w1', at(300, t0), new Date(t0))).toBe(true)
    const held = (await runs.getById(db, run.id))?.claimExpiresAt
    // Not due again yet for its own owner (the lease moved wake_at to its expiry) ...
    expect(await leases(run.id, 'w1', at(10_000, t0), at(1, t0))).toBe(false)
    // ... and a caller whose clock runs a minute ahead sees it due, but the lease is live on the database's clock.
    expect(await leases(run.id, 'w2', at(70_000, t0), at(60_000, t0))).toBe(false)
    expect((await runs.getById(db, run.id))?.claimExpiresAt?.getTime()).toBe(held?.getTime())
    await sleepMs(350)
    expect(await leases(run.id, 'w1', at(10_000, t0), at(400, t0))).toBe(true)
  })

  it('in real time: a short lease blocks its own owner, then lapses', async () => {
    const run = await makeRun(db)
    await runningUnleased(run)
    expect(await leases(run.id, 'w1', at(150), new Date())).toBe(true)
    expect(await leases(run.id, 'w1', at(150), at(200))).toBe(false)
    await sleepMs(200)
    expect(await leases(run.id, 'w1', at(150), new Date())).toBe(true)
  })
})

describe('invariant 4: releaseClaim releases only the caller’s claim and sets wake_at', () => {
  it('another owner cannot release; the claim stays intact', async () => {
    const run = await makeRun(db)
    await startRunning(run, 'owner')
    const before = await runs.getById(db, run.id)
    expect(await runs.releaseClaim(db, run.id, 'intruder')).toBe(false)
    expect(await runs.releaseClaim(db, run.id, 'intruder', { wakeAt: null })).toBe(false)
    const after = await runs.getById(db, run.id)
    expect(after?.claimedBy).toBe('owner')
    expect(after?.claimExpiresAt?.getTime()).toBe(before?.claimExpiresAt?.getTime())
    expect(after?.wakeAt?.getTime()).toBe(before?.wakeAt?.getTime())
  })

  it('a run parked on a cue is released with wake_at NULL and leaves the due set', async () => {
    const run = await makeRun(db)
    await startRunning(run, 'owner')
    expect(await runs.releaseClaim(db, run.id, 'owner', { wakeAt: null })).toBe(true)
    const row = await runs.getById(db, run.id)
    expect(row).toMatchObject({
      status: 'running',
      claimedBy: null,
      claimExpiresAt: null,
      claimToken: null,
      wakeAt: null,
    })
    expect(ids(await runs.findDue(db, at(365 * 86_400_000), 500))).not.toContain(run.id)
    // Released twice: nothing left to release.
    expect(await runs.releaseClaim(db, run.id, 'owner')).toBe(false)
    // A person resolving the cue wakes it.
    expect(await runs.wakeNow(db, run.id)).toBe(true)
    expect(ids(await runs.findDue(db, at(1000)))).toEqual([run.id])
  })

  it('a wake asked for while the run was claimed (a cue answered as it parked) survives the release', async () => {
    const run = await makeRun(db)
    await startRunning(run, 'owner')
    // The holder has parked the cue and not yet released; a person answers it now.
    const answeredAt = at(0)
    expect(await runs.wakeNow(db, run.id, answeredAt)).toBe(true)
    // The holder's release carries its plan from before the answer: the cue's timeout.
    expect(await runs.releaseClaim(db, run.id, 'owner', { wakeAt: at(240_000) })).toBe(true)
    expect((await runs.getById(db, run.id))?.wakeAt?.getTime()).toBe(answeredAt.getTime())
    expect(ids(await runs.findDue(db, at(1000)))).toContain(run.id)
    // The same for a cue without a timeout (released with NULL), through the batch release.
    const other = await makeRun(db)
    await startRunning(other, 'owner')
    expect(await runs.wakeNow(db, other.id, answeredAt)).toBe(true)
    expect(await runs.releaseClaims(db, [other.id], 'owner', null)).toBe(1)
    expect((await runs.getById(db, other.id))?.wakeAt?.getTime()).toBe(answeredAt.getTime())
  })

  it('a sleeping run is released with its timer’s end and comes due then', async () => {
    const run = await makeRun(db)
    await startRunning(run, 'owner')
    const wake = at(10_000)
    expect(await runs.releaseClaim(db, run.id, 'owner', { wakeAt: wake })).toBe(true)
    expect((await runs.getById(db, run.id))?.wakeAt?.getTime()).toBe(wake.getTime())
    expect(ids(await runs.findDue(db, at(-1, wake)))).toEqual([])
    expect(ids(await runs.findDue(db, wake))).toEqual([run.id])
  })

  it('by default a released run is due at once', async () => {
    const run = await makeRun(db)
    await startRunning(run, 'owner')
    expect(await runs.releaseClaim(db, run.id, 'owner')).toBe(true)
    expect(ids(await runs.findDue(db, at(1000)))).toEqual([run.id])
  })
})

describe('invariant 5: guarded transitions', () => {
  it('from → to reports applied; a wrong `from` answers false and changes nothing', async () => {
    const run = await makeRun(db)
    const before = await rawRun(db, run.id)
    await sleepMs(5)
    expect(await runs.transition(db, run.id, 'running', 'paused')).toBe(false)
    expect(await runs.transition(db, run.id, ['starting', 'ending'], 'completed')).toBe(false)
    expect(await rawRun(db, run.id)).toEqual(before)
    await runs.claimStart(db, run, 'w1', LEASE())
    expect(await runs.transition(db, run.id, 'starting', 'running', { phase: 'intro' })).toBe(true)
    const row = await runs.getById(db, run.id)
    expect(row).toMatchObject({ status: 'running', currentPhase: 'intro', claimedBy: 'w1', endedAt: null })
    expect(await runs.transition(db, run.id, 'starting', 'running')).toBe(false)
  })

  it('into a terminal status: stamps ended_at, drops claim and wake, releases the key lock', async () => {
    const run = await makeRun(db, { concurrencyKey: 'key-5' })
    await startRunning(run, 'w1')
    expect((await locks(db)).get('key-5')).toBe(run.id)
    expect(
      await runs.transition(db, run.id, ['running', 'paused'], 'failed', { error: 'x'.repeat(2000) }),
    ).toBe(true)
    const row = await runs.getById(db, run.id)
    expect(row).toMatchObject({
      status: 'failed',
      claimedBy: null,
      claimExpiresAt: null,
      claimToken: null,
      wakeAt: null,
    })
    expect(row?.endedAt).toBeInstanceOf(Date)
    expect(row?.lastError).toHaveLength(1000)
    expect((await locks(db)).has('key-5')).toBe(false)
    // The in-flight guards no longer match, and ended_at stays.
    const ended = (await rawRun(db, run.id)).ended_at_text
    await sleepMs(5)
    for (const from of ['running', 'paused', 'ending', 'starting'] as RunStatus[]) {
      expect(await runs.transition(db, run.id, from, 'completed')).toBe(false)
    }
    expect((await rawRun(db, run.id)).ended_at_text).toBe(ended)
    expect(await runs.statusOf(db, run.id)).toBe('failed')
  })

  // src/states.ts: terminal statuses are "statuses a run never leaves". A caller
  // that names a terminal status as `from` (say, a cancel guarded on "any
  // status") must not turn a completed run into a cancelled one, or a failed run
  // back into a running one.
  it('a terminal run never leaves its status, even when the caller names it as `from`', async () => {
    const fx = await makeDefinition(db)
    const done = await makeRun(db, { definition: fx })
    await runningUnleased(done)
    expect(await runs.transition(db, done.id, 'running', 'completed')).toBe(true)
    const before = await rawRun(db, done.id)
    expect(await runs.transition(db, done.id, ['running', 'completed'], 'cancelled')).toBe(false)
    expect(await runs.transition(db, done.id, 'completed', 'running', { wakeAt: new Date() })).toBe(false)
    expect(await runs.transitionMany(db, [done.id], ['completed', 'running'], 'failed')).toBe(0)
    expect(await rawRun(db, done.id)).toEqual(before)
  })

  it('into paused clears wake_at (a paused run is never due) and keeps the key', async () => {
    const run = await makeRun(db, { concurrencyKey: 'key-p' })
    await startRunning(run, 'w1')
    expect(await runs.transition(db, run.id, 'running', 'paused', { clearClaim: true })).toBe(true)
    const row = await runs.getById(db, run.id)
    expect(row).toMatchObject({ status: 'paused', wakeAt: null, claimedBy: null, endedAt: null })
    expect((await locks(db)).get('key-p')).toBe(run.id)
    expect(ids(await runs.findDue(db, at(86_400_000), 500))).toEqual([])
    // Resume sets wake_at so it comes due again.
    const now = new Date()
    expect(await runs.transition(db, run.id, 'paused', 'running', { wakeAt: now })).toBe(true)
    expect(ids(await runs.findDue(db, at(1, now)))).toEqual([run.id])
  })

  it('transitionMany moves only rows in `from`, and terminal moves stamp, clear and release keys', async () => {
    const fx = await makeDefinition(db)
    const a = await makeRun(db, { definition: fx, concurrencyKey: 'm1' })
    const b = await makeRun(db, { definition: fx, concurrencyKey: 'm2' })
    const c = await makeRun(db, { definition: fx })
    const idle = await makeRun(db, { definition: fx, concurrencyKey: 'm3' })
    for (const r of [a, b, c]) await startRunning(r, 'w1')
    expect((await locks(db)).size).toBe(2)
    expect(await runs.transitionMany(db, [a.id, b.id, c.id, idle.id], 'running', 'cancelled')).toBe(3)
    for (const r of [a, b, c]) {
      const row = await runs.getById(db, r.id)
      expect(row).toMatchObject({ status: 'cancelled', claimedBy: null, claimExpiresAt: null, wakeAt: null })
      expect(row?.endedAt).toBeInstanceOf(Date)
    }
    expect(await runs.statusOf(db, idle.id)).toBe('scheduled')
    expect((await locks(db)).size).toBe(0)
    expect(await runs.transitionMany(db, [a.id, b.id], 'running', 'completed')).toBe(0)
    expect(await runs.transitionMany(db, [], 'running', 'completed')).toBe(0)
  })
})

describe('invariant 7: health is guarded on its current value', () => {
  it('the same value answers false and does not restamp updated_at; a different value does', async () => {
    const run = await makeRun(db)
    const u0 = (await rawRun(db, run.id)).updated_at_text
    await sleepMs(10)
    expect(await runs.setHealth(db, run.id, 'ok')).toBe(false)
    expect((await rawRun(db, run.id)).updated_at_text).toBe(u0)
    expect(await runs.setHealth(db, run.id, 'degraded')).toBe(true)
    const u1 = (await rawRun(db, run.id)).updated_at_text
    expect(u1).not.toBe(u0)
    expect((await runs.getById(db, run.id))?.health).toBe('degraded')
    await sleepMs(10)
    expect(await runs.setHealth(db, run.id, 'degraded')).toBe(false)
    expect((await rawRun(db, run.id)).updated_at_text).toBe(u1)
    expect(await runs.setHealth(db, run.id, 'ok')).toBe(true)
    expect((await runs.getById(db, run.id))?.status).toBe('scheduled') // health never moves status
  })

  it('setPhase is guarded the same way', async () => {
    const run = await makeRun(db)
    expect(await runs.setPhase(db, run.id, 'intro')).toBe(true)
    const u0 = (await rawRun(db, run.id)).updated_at_text
    await sleepMs(10)
    expect(await runs.setPhase(db, run.id, 'intro')).toBe(false)
    expect((await rawRun(db, run.id)).updated_at_text).toBe(u0)
  })
})

describe('invariant 8: missed is per-definition grace, and only for scheduled runs', () => {
  it('findMissed uses each run’s own definition grace and never returns a started run', async () => {
    const T = Date.now()
    const short = await makeDefinition(db, { graceSeconds: 60 })
    const long = await makeDefinition(db, { graceSeconds: 600 })
    const a1 = await makeRun(db, { definition: short, scheduledFor: at(-120_000, T) }) // past 60 s
    const a2 = await makeRun(db, { definition: short, scheduledFor: at(-30_000, T) }) // inside
    const b1 = await makeRun(db, { definition: long, scheduledFor: at(-120_000, T) }) // inside 600 s
    const b2 = await makeRun(db, { definition: long, scheduledFor: at(-900_000, T) }) // past 600 s
    const started = await makeRun(db, { definition: short, scheduledFor: at(-300_000, T) })
    // Claimed while it was inside its grace; now far past it.
    expect((await runs.claimStart(db, started, 'w1', at(60_000, T), at(-299_000, T))).claimed).toBe(true)
    const missed = await runs.findMissed(db, new Date(T))
    expect(ids(missed)).toEqual([b2.id, a1.id])
    expect(ids(missed)).not.toContain(started.id)
    expect(ids(missed)).not.toContain(a2.id)
    expect(ids(missed)).not.toContain(b1.id)
    // claimStart refuses the run past its grace; the same age inside a longer grace is claimable.
    expect(await runs.claimStart(db, a1, 'w1', at(60_000, T), new Date(T))).toEqual({
      claimed: false,
      blockedBy: null,
    })
    expect(await runs.statusOf(db, a1.id)).toBe('scheduled')
    expect((await runs.claimStart(db, b1, 'w1', at(60_000, T), new Date(T))).claimed).toBe(true)
  })

  it('at the grace boundary a run is claimable and not missed; one millisecond later the reverse', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 60 })
    const when = at(-30_000)
    const edge = at(60_000, when)
    const r1 = await makeRun(db, { definition: fx, scheduledFor: when, scope: 'a' })
    const r2 = await makeRun(db, { definition: fx, scheduledFor: when, scope: 'b' })
    expect(ids(await runs.findMissed(db, edge))).toEqual([])
    expect(ids(await runs.findMissed(db, at(1, edge)))).toEqual([r1.id, r2.id])
    expect((await runs.claimStart(db, r2, 'w', at(60_000, edge), at(1, edge))).claimed).toBe(false)
    expect((await runs.claimStart(db, r1, 'w', at(60_000, edge), edge)).claimed).toBe(true)
  })

  it('a keyed run past its grace is refused and leaves no lock row behind', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 60, concurrencyKey: 'late-key' })
    const run = await makeRun(db, { definition: fx, scheduledFor: at(-120_000) })
    expect(await runs.claimStart(db, run, 'w1', LEASE())).toEqual({ claimed: false, blockedBy: null })
    expect((await locks(db)).size).toBe(0)
    expect(await runs.statusOf(db, run.id)).toBe('scheduled')
    // The missed sweep can still move it.
    expect(await runs.transition(db, run.id, 'scheduled', 'missed')).toBe(true)
  })
})

describe('invariant 9: concurrency keys', () => {
  it('a second run with the same key is blocked while the holder is starting/running/paused/ending', async () => {
    const fx = await makeDefinition(db, { concurrencyKey: 'stage' })
    const holder = await makeRun(db, { definition: fx, scope: 'h' })
    const other = await makeRun(db, { definition: fx, scope: 'o' })
    expect(await runs.claimStart(db, holder, 'w1', LEASE())).toEqual({ claimed: true, blockedBy: null })

    const blocked = { claimed: false, blockedBy: holder.id }
    const walk: [RunStatus, RunStatus][] = [
      ['starting', 'starting'],
      ['starting', 'running'],
      ['running', 'paused'],
      ['paused', 'running'],
      ['running', 'ending'],
    ]
    for (const [from, to] of walk) {
      if (from !== to) expect(await runs.transition(db, holder.id, from, to)).toBe(true)
      expect(await runs.claimStart(db, other, 'w2', LEASE())).toEqual(blocked)
      expect(await runs.statusOf(db, other.id)).toBe('scheduled')
      expect(await runs.concurrencyHolder(db, 'stage', other.id)).toEqual({
        id: holder.id,
        status: to,
        definitionId: fx.def.id,
      })
      expect((await locks(db)).get('stage')).toBe(holder.id)
    }
    expect(await runs.concurrencyHolder(db, 'stage', holder.id)).toBeNull()

    expect(await runs.transition(db, holder.id, 'ending', 'completed')).toBe(true)
    expect(await runs.concurrencyHolder(db, 'stage', other.id)).toBeNull()
    expect(await runs.claimStart(db, other, 'w2', LEASE())).toEqual({ claimed: true, blockedBy: null })
    expect((await locks(db)).get('stage')).toBe(other.id)
    expect(await runs.concurrencyHolder(db, 'stage', holder.id)).toMatchObject({
      id: other.id,
      status: 'starting',
    })
  })

  it('different keys and NULL keys never contend', async () => {
    const a = await makeRun(db, { concurrencyKey: 'k-a' })
    const b = await makeRun(db, { concurrencyKey: 'k-b' })
    const n1 = await makeRun(db, { concurrencyKey: null })
    const n2 = await makeRun(db, { concurrencyKey: null })
    for (const r of [a, b, n1, n2])
      expect(await runs.claimStart(db, r, 'w', LEASE())).toEqual({ claimed: true, blockedBy: null })
    expect(await runs.concurrencyHolder(db, null, n1.id)).toBeNull()
    expect(await runs.concurrencyHolder(db, '', n1.id)).toBeNull()
    expect([...(await locks(db)).keys()].sort()).toEqual(['k-a', 'k-b'])
  })

  it('a stale lock row whose holder is terminal (or gone) is taken over', async () => {
    const fx = await makeDefinition(db, { concurrencyKey: 'stale' })
    const holder = await makeRun(db, { definition: fx })
    const next = await makeRun(db, { definition: fx })
    await startRunning(holder, 'w1')
    // A holder that went terminal without its lock being released (a crash
    // between the transition and the release): no repository makes this state.
    await db.run(`UPDATE event_runs SET status = 'failed', ended_at = NOW(3) WHERE id = ?`, [holder.id])
    expect((await locks(db)).get('stale')).toBe(holder.id)
    // Who holds a key is read through its lock row: a terminal holder holds nothing.
    expect(await runs.concurrencyHolder(db, 'stale', next.id)).toBeNull()
    expect(await runs.holdersOfKeys(db, ['stale'])).toEqual([])
    expect(await runs.claimStart(db, next, 'w2', LEASE())).toEqual({ claimed: true, blockedBy: null })
    expect((await locks(db)).get('stale')).toBe(next.id)
    expect(await runs.holdersOfKeys(db, ['STALE', 'nobody'])).toEqual([
      { requestedKey: 'STALE', id: next.id, status: 'starting', definitionId: fx.def.id },
    ])

    const orphanKey = await makeRun(db, { concurrencyKey: 'orphan' })
    await db.run('INSERT INTO concurrency_locks (lock_key, run_id) VALUES (?, ?)', ['orphan', 987654321])
    expect(await runs.claimStart(db, orphanKey, 'w2', LEASE())).toEqual({ claimed: true, blockedBy: null })
    expect((await locks(db)).get('orphan')).toBe(orphanKey.id)
  })

  it('a blocked run can be deferred behind newly due runs (deferStart)', async () => {
    const fx = await makeDefinition(db, { concurrencyKey: 'defer' })
    const holder = await makeRun(db, { definition: fx })
    const waiting = await makeRun(db, { definition: fx })
    await startRunning(holder, 'w1')
    expect((await runs.claimStart(db, waiting, 'w2', LEASE())).blockedBy).toBe(holder.id)
    const until = at(5_000)
    expect(await runs.deferStart(db, waiting.id, until)).toBe(true)
    expect(ids(await runs.findDue(db, at(-1, until)))).not.toContain(waiting.id)
    expect(ids(await runs.findDue(db, until))).toContain(waiting.id)
    expect(await runs.deferStart(db, holder.id, until)).toBe(false) // not scheduled
  })
})

describe('invariant 10: reclaim releases the lease only', () => {
  it('releases expired leases only, changes no status, and makes the run due', async () => {
    const T = Date.now()
    const stale = await makeRun(db)
    const live = await makeRun(db)
    const starting = await makeRun(db)
    // The live lease first (its run then is not due), then leases of 1 ms that run
    // out by the time reclaim runs (on the database's clock).
    await runningUnleased(live)
    expect(await leases(live.id, 'alive', at(60_000), new Date())).toBe(true)
    await runningUnleased(stale)
    expect(await leases(stale.id, 'crashed', at(1), new Date())).toBe(true)
    await runs.claimStart(db, starting, 'crashed', at(1, T), new Date(T))
    await runs.setHealth(db, stale.id, 'degraded')
    const before = await runs.getById(db, stale.id)
    await sleepMs(20)

    expect(await runs.reclaimStale(db)).toBe(2)
    const after = await runs.getById(db, stale.id)
    expect(after).toMatchObject({
      status: 'running',
      health: 'degraded',
      claimedBy: null,
      claimExpiresAt: null,
      currentPhase: before?.currentPhase,
    })
    expect(after?.startedAt?.getTime()).toBe(before?.startedAt?.getTime())
    expect(await runs.statusOf(db, starting.id)).toBe('starting')
    expect((await runs.getById(db, starting.id))?.claimedBy).toBeNull()
    expect((await runs.getById(db, live.id))?.claimedBy).toBe('alive')
    // The lease's expiry left wake_at in the past: both come due, the live one does not.
    expect(ids(await runs.findDue(db, at(2_000, T))).sort()).toEqual([stale.id, starting.id].sort())
    expect(await runs.reclaimStale(db)).toBe(0)
  })
})

describe('invariant 11: only terminal runs are eligible for log retention', () => {
  it('terminalBefore returns terminal runs ended before the cutoff; deleteForRuns deletes their logs only', async () => {
    const fx = await makeDefinition(db)
    const made: Record<string, RunRow> = {}
    for (const name of ['completed', 'cancelled', 'failed', 'missed', 'running', 'paused', 'scheduled']) {
      made[name] = await makeRun(db, { definition: fx })
    }
    const r = (name: string) => made[name] as RunRow
    for (const name of ['completed', 'cancelled', 'failed', 'running', 'paused'])
      await runningUnleased(r(name))
    await runs.transition(db, r('completed').id, 'running', 'completed')
    await runs.transition(db, r('cancelled').id, 'running', 'cancelled')
    await runs.transition(db, r('failed').id, 'running', 'failed')
    await runs.transition(db, r('missed').id, 'scheduled', 'missed')
    await runs.transition(db, r('paused').id, 'running', 'paused')
    const terminal = ['completed', 'cancelled', 'failed', 'missed'].map((n) => r(n).id).sort((a, b) => a - b)

    expect(await runs.terminalBefore(db, at(60_000))).toEqual(terminal)
    expect(await runs.terminalBefore(db, at(-60_000))).toEqual([])
    expect(await runs.terminalBefore(db, at(60_000), 2)).toEqual(terminal.slice(0, 2))
    // One ended long ago: only it is before a cutoff an hour back.
    await db.run('UPDATE event_runs SET ended_at = ? WHERE id = ?', [at(-86_400_000), r('failed').id])
    expect(await runs.terminalBefore(db, at(-3_600_000))).toEqual([r('failed').id])

    await logs.appendMany(
      db,
      Object.values(made).flatMap((run) => [
        { runId: run.id, message: 'one' },
        { runId: run.id, message: 'two', level: 'warn' as const },
      ]),
    )
    const eligible = await runs.terminalBefore(db, at(60_000))
    expect(await logs.deleteForRuns(db, eligible)).toBe(8)
    for (const id of terminal) expect(await logs.listForRun(db, id)).toEqual([])
    for (const name of ['running', 'paused', 'scheduled'])
      expect(await logs.listForRun(db, r(name).id)).toHaveLength(2)
    expect(await countRows(db, 'event_runs')).toBe(7)
    expect(await logs.deleteForRuns(db, [])).toBe(0)
  })
})

describe('invariant 14: lists', () => {
  it('is newest first (scheduled_for DESC, id DESC, ties included) and filters by definition and status', async () => {
    const a = await makeDefinition(db)
    const b = await makeDefinition(db)
    const T = Date.now()
    const tie = at(-3_600_000, T)
    const made: RunRow[] = []
    made.push(await makeRun(db, { definition: a, scheduledFor: at(-7_200_000, T) }))
    made.push(await makeRun(db, { definition: a, scheduledFor: tie, scope: 'x' }))
    made.push(await makeRun(db, { definition: b, scheduledFor: at(3_600_000, T) }))
    made.push(await makeRun(db, { definition: b, scheduledFor: tie, scope: 'x' }))
    made.push(await makeRun(db, { definition: a, scheduledFor: tie, scope: 'y' }))
    made.push(await makeRun(db, { definition: a, scheduledFor: at(-10_800_000, T) }))
    const expected = [...made].sort(
      (p, q) => q.scheduledFor.getTime() - p.scheduledFor.getTime() || q.id - p.id,
    )
    const listed = await listRuns(db)
    expect(ids(listed)).toEqual(ids(expected))
    // The three ties come out highest id first.
    const tieIds = listed.filter((r) => r.scheduledFor.getTime() === tie.getTime()).map((r) => r.id)
    expect(tieIds).toEqual([...tieIds].sort((x, y) => y - x))
    expect(tieIds).toHaveLength(3)

    expect(ids(await listRuns(db, { definitionId: b.def.id }))).toEqual(
      ids(expected.filter((r) => r.definitionId === b.def.id)),
    )
    const claimed = made[1] as RunRow
    expect((await runs.claimStart(db, claimed, 'w', LEASE(), at(0, claimed.scheduledFor))).claimed).toBe(true)
    expect(ids(await listRuns(db, { status: 'starting' }))).toEqual([claimed.id])
    expect(ids(await listRuns(db, { status: 'starting', definitionId: b.def.id }))).toEqual([])
    expect(await listRuns(db, { status: 'completed' })).toEqual([])
    const first = listed[0]
    expect(first).toMatchObject({
      definitionSlug: expect.any(String),
      definitionTitle: 'Fixture event',
      versionNumber: 1,
    })
  })

  it('clamps the limit to 1..500 (0 → 1, -5 → 1, 10000 → 500, NaN → 100)', async () => {
    const fx = await makeDefinition(db)
    const base = Date.now() - 86_400_000
    const batch: NewRun[] = Array.from({ length: 600 }, (_, i) =>
      newRun(fx, { scope: '', scheduledFor: at(i * 1000, base) }),
    )
    expect(await runs.materialiseMany(db, batch)).toBe(600)
    expect(await listRuns(db, { limit: 0 })).toHaveLength(1)
    expect(await listRuns(db, { limit: -5 })).toHaveLength(1)
    expect(await listRuns(db, { limit: 10_000 })).toHaveLength(500)
    expect(await listRuns(db, { limit: Number.NaN })).toHaveLength(100)
    expect(await listRuns(db, { limit: Number.POSITIVE_INFINITY })).toHaveLength(100)
    expect(await listRuns(db, {})).toHaveLength(100)
    expect(await listRuns(db, { limit: 7.9 })).toHaveLength(7)
    expect(await listRuns(db, { limit: '3; DROP TABLE event_runs' as unknown as number })).toHaveLength(100)
    expect(await runs.findDue(db, new Date(), 0)).toHaveLength(1)
    expect(await runs.findDue(db, new Date(), 10_000)).toHaveLength(500)
    expect(await runs.findMissed(db, at(86_400_000), -1)).toHaveLength(1)
    expect(await countRows(db, 'event_runs')).toBe(600)
  })

  it('binds hostile status and definitionId values (no injection; the table survives)', async () => {
    const run = await makeRun(db)
    const hostile = "'; DROP TABLE event_runs; --"
    expect(await listRuns(db, { status: hostile as RunStatus })).toEqual([])
    expect(await listRuns(db, { status: "scheduled' OR '1'='1" as RunStatus })).toEqual([])
    expect(await listRuns(db, { definitionId: '0 OR 1=1' as unknown as number })).toEqual([])
    expect(await listRuns(db, { definitionId: hostile as unknown as number })).toEqual([])
    expect(ids(await listRuns(db))).toEqual([run.id])
    expect(await countRows(db, 'event_runs')).toBe(1)
  })
})

describe('no starvation: idle runs leave the due query', () => {
  /** `n` runs of one definition, older than anything due, inserted fast. */
  async function bulkRuns(fx: DefinitionFixture, n: number): Promise<number[]> {
    const base = Date.now() - 7 * 86_400_000
    for (let i = 0; i < n; i += 2000) {
      const chunk = Array.from({ length: Math.min(2000, n - i) }, (_, j) =>
        newRun(fx, { scope: '', scheduledFor: at((i + j) * 1000, base) }),
      )
      expect(await runs.materialiseMany(db, chunk)).toBe(chunk.length)
    }
    const rows = await db.query<{ id: number }>(
      'SELECT id FROM event_runs WHERE definition_id = ? ORDER BY id',
      [fx.def.id],
    )
    const idList = rows.map((r) => Number(r.id))
    expect(idList).toHaveLength(n)
    // One cue step per run through the repository; its state is set below.
    await steps.expand(
      db,
      idList.map((runId) => ({
        runId,
        specs: stepSpecs(1, { kind: 'core.cue', params: { prompt: 'go?' } }),
      })),
    )
    return idList
  }

  async function twentyDue(): Promise<number[]> {
    const fresh = await makeDefinition(db, { graceSeconds: 3600 })
    const T = Date.now()
    const batch = Array.from({ length: 20 }, (_, i) =>
      newRun(fresh, { scope: '', scheduledFor: at(-20_000 + i * 10, T) }),
    )
    expect(await runs.materialiseMany(db, batch)).toBe(20)
    const rows = await db.query<{ id: number }>(
      'SELECT id FROM event_runs WHERE definition_id = ? ORDER BY id',
      [fresh.def.id],
    )
    return rows.map((r) => Number(r.id))
  }

  it('10,000 runs parked on cues: one findDue(now, 50) returns exactly the 20 newly due runs', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    await bulkRuns(fx, 10_000)
    // Raw: the parked state of 10,000 rows at once (no repository bulk-parks).
    await db.run(
      `UPDATE event_runs SET status = 'running', started_at = scheduled_for, wake_at = NULL WHERE definition_id = ?`,
      [fx.def.id],
    )
    await db.run(
      `UPDATE event_run_steps s JOIN event_runs r ON r.id = s.run_id
          SET s.status = 'running', s.parked = 1, s.attempts = 1, s.started_at = r.scheduled_for
        WHERE r.definition_id = ?`,
      [fx.def.id],
    )
    expect((await steps.waitingSummary(db)).count).toBe(10_000)
    const due = await twentyDue()
    const found = await runs.findDue(db, new Date(), 50)
    expect(ids(found)).toEqual(due)
    expect(found.every((r) => r.status === 'scheduled')).toBe(true)
  })

  it('10,000 runs sleeping with wake_at in the future: one findDue(now, 50) returns exactly the 20', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    await bulkRuns(fx, 10_000)
    const later = at(3_600_000)
    await db.run(
      `UPDATE event_runs SET status = 'running', started_at = scheduled_for, wake_at = ? WHERE definition_id = ?`,
      [later, fx.def.id],
    )
    await db.run(
      `UPDATE event_run_steps s JOIN event_runs r ON r.id = s.run_id
          SET s.kind = 'core.wait', s.status = 'running', s.parked = 0, s.attempts = 1, s.wake_at = ?,
              s.started_at = r.scheduled_for
        WHERE r.definition_id = ?`,
      [later, fx.def.id],
    )
    expect((await steps.waitingSummary(db)).count).toBe(0) // timers are never "waiting"
    const due = await twentyDue()
    const found = await runs.findDue(db, new Date(), 50)
    expect(ids(found)).toEqual(due)
    // When the timers end, the sleepers come due (oldest first), ahead of nothing new.
    expect((await runs.findDue(db, at(1, later), 50)).length).toBe(50)
  })
})

describe('the start reserve (migration 0003)', () => {
  const reserve = async (id: number) => {
    const [row] = await db.query<{ n: number | null }>(
      'SELECT LENGTH(start_reserve) AS n FROM event_runs WHERE id = ?',
      [id],
    )
    return row?.n === null || row?.n === undefined ? null : Number(row.n)
  }
  const rowBytes = async (id: number) => {
    const [row] = await db.query<{ n: number }>(
      `SELECT COALESCE(LENGTH(start_reserve), 0) + COALESCE(LENGTH(current_phase), 0)
              + IF(started_at IS NULL, 0, 7) + IF(ended_at IS NULL, 0, 7) + IF(wake_at IS NULL, 0, 7) AS n
         FROM event_runs WHERE id = ?`,
      [id],
    )
    return Number(row?.n)
  }

  it('every new run holds 48 bytes, and its move out of scheduled hands them back, whichever way it leaves', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    const [batch, keyed, missed] = [
      await makeRun(db, { definition: fx, scope: 'batch', scheduledFor: at(-1000) }),
      await makeRun(db, {
        definition: fx,
        scope: 'keyed',
        scheduledFor: at(-1000),
        concurrencyKey: 'reserve',
      }),
      await makeRun(db, { definition: fx, scope: 'missed', scheduledFor: at(-1000) }),
    ]
    for (const r of [batch, keyed, missed]) expect(await reserve(r.id)).toBe(48)
    const before = await rowBytes(batch.id)

    // The start transaction, finishing the run at once: the row does not grow.
    await db.transaction(async (tx) => {
      const locked = await runs.lockDueToStart(tx, new Date(), 10)
      expect(locked.map((r) => r.id)).toContain(batch.id)
      const moved = await runs.markStarted(tx, [batch.id], { status: 'completed', phase: 'main' })
      expect(moved).toBe(1)
    })
    expect(await reserve(batch.id)).toBeNull()
    expect(await rowBytes(batch.id)).toBeLessThanOrEqual(before)

    expect((await runs.claimStart(db, keyed, 'w1', LEASE())).claimed).toBe(true)
    expect(await reserve(keyed.id)).toBeNull()
    expect(await runs.transition(db, missed.id, 'scheduled', 'missed')).toBe(true)
    expect(await reserve(missed.id)).toBeNull()
  })
})
