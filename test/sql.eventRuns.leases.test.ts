/**
 * Leases of runs in flight against a real MariaDB: invariants 2 (claimTickBatch, renewal), 3, 10 and
 * 12 (a paused run is never leased) of docs/contract.md. Every test starts from empty run tables
 * (definitions stay): findDue spans every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { RunRow } from '../sql/eventRuns/index.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { ids, inFlight, LEASE } from './helpers/eventRuns.ts'
import { at, makeDefinition, makeRun, resetRuns, sleepMs, stepSpecs } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

const { startRunning, runningUnleased } = inFlight(() => db)

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

describe('invariant 2: claims are compare-and-set', () => {
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
