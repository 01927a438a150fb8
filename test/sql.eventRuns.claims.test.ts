/**
 * Start claims and their release against a real MariaDB: invariants 2 (claimStart, lockDueToStart)
 * and 4 of docs/contract.md. Every test starts from empty run tables (definitions stay): findDue
 * spans every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { useTestDb } from './helpers/db.ts'
import { ids, inFlight, LEASE } from './helpers/eventRuns.ts'
import { at, locks, makeDefinition, makeRun, resetRuns } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

const { startRunning } = inFlight(() => db)

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
