/**
 * Status moves, health, missed runs and concurrency keys against a real MariaDB: invariants 5, 7, 8 and 9
 * of docs/contract.md. Every test starts from empty run tables (definitions stay), because findDue and
 * findMissed span every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import type { RunStatus } from '../sql/states.ts'
import { useTestDb } from './helpers/db.ts'
import { ids, inFlight, LEASE } from './helpers/eventRuns.ts'
import { at, locks, makeDefinition, makeRun, rawRun, resetRuns, sleepMs } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

const { startRunning, runningUnleased } = inFlight(() => db)

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
