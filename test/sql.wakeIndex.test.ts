/**
 * Key-less scheduled runs have no `wake_at` (migration 0030): the due index
 * finds them by their `scheduled_for`, so a run that finishes in its start
 * leaves `idx_evrun_wake` as it found it, while the runner still sleeps until,
 * and starts, every kind of run on time.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db, SqlValue } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { at, makeDefinition, makeRun, resetRuns } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

async function wakeOf(id: number): Promise<Date | null> {
  const [row] = await db.query<{ w: Date | null }>('SELECT wake_at AS w FROM event_runs WHERE id = ?', [id])
  return row?.w ?? null
}

describe('which runs have a wake_at', () => {
  it('not key-less scheduled runs; keyed and overlap runs from their making, in-flight runs from their start', async () => {
    const fx = await makeDefinition(db)
    const keyless = await makeRun(db, { definition: fx, concurrencyKey: null })
    const keyed = await makeRun(db, { definition: fx, concurrencyKey: 'room-1' })
    const overlapped = await makeRun(db, { definition: fx, concurrencyKey: null, overlap: 'skip' })
    const running = await makeRun(db, { definition: fx, concurrencyKey: null })
    const lease = at(60_000)
    expect(await runs.claimStart(db, running, 'w1', lease)).toMatchObject({ claimed: true })

    expect(await wakeOf(keyless.id)).toBeNull()
    expect((await wakeOf(keyed.id))?.getTime()).toBe(keyed.scheduledFor.getTime())
    expect((await wakeOf(overlapped.id))?.getTime()).toBe(overlapped.scheduledFor.getTime())
    expect((await wakeOf(running.id))?.getTime()).toBe(lease.getTime())
    // A keyed run held back while its key is held is deferred by its wake_at.
    const later = at(5_000)
    expect(await runs.deferStart(db, keyed.id, later)).toBe(true)
    expect((await wakeOf(keyed.id))?.getTime()).toBe(later.getTime())
  })

  it('a run moved to another instant gets a wake_at only if it moves with a key (or has an overlap policy)', async () => {
    const fx = await makeDefinition(db)
    const plain = await makeRun(db, { definition: fx, concurrencyKey: null })
    const policy = await makeRun(db, { definition: fx, concurrencyKey: null, overlap: 'buffer_one' })
    const to = at(120_000)
    expect(await runs.moveScheduled(db, plain.id, to, null)).toBe(true)
    expect(await wakeOf(plain.id)).toBeNull()
    expect(await runs.moveScheduled(db, policy.id, to, null)).toBe(true)
    expect((await wakeOf(policy.id))?.getTime()).toBe(to.getTime())
    const later = at(180_000)
    expect(await runs.moveScheduled(db, plain.id, later, 'stage-2')).toBe(true)
    expect((await wakeOf(plain.id))?.getTime()).toBe(later.getTime())
    expect(await runs.moveScheduled(db, plain.id, to, null)).toBe(true)
    expect(await wakeOf(plain.id)).toBeNull()
    // A rehearsal never carries a key, so it never waits in the wake index either.
    const rehearsal = await makeRun(db, { definition: fx, concurrencyKey: 'stage-3', rehearsal: true })
    expect(await wakeOf(rehearsal.id)).toBeNull()
  })

  it('a key-less run moved out of scheduled without a wake time is due at its scheduled instant, not parked unseen', async () => {
    const fx = await makeDefinition(db)
    const run = await makeRun(db, { definition: fx, concurrencyKey: null, scheduledFor: at(-3_000) })
    const given = await makeRun(db, { definition: fx, concurrencyKey: null, scheduledFor: at(-3_000) })
    expect(await runs.transition(db, run.id, 'scheduled', 'running')).toBe(true)
    expect((await wakeOf(run.id))?.getTime()).toBe(run.scheduledFor.getTime())
    // A wake time given is kept, and a move between in-flight statuses leaves wake_at alone.
    const later = at(60_000)
    expect(await runs.transition(db, given.id, 'scheduled', 'running', { wakeAt: later })).toBe(true)
    expect(await runs.transition(db, given.id, 'running', 'ending')).toBe(true)
    expect((await wakeOf(given.id))?.getTime()).toBe(later.getTime())
    const leased = await runs.claimTickBatch(db, 'w1', 'tok-moved', at(30_000), new Date(), 100)
    expect(leased.map((r) => r.id)).toEqual([run.id])
  })

  it('a single-step run started and finished by a runner tick goes from NULL to NULL: no wake entry rewritten', async () => {
    const fx = await makeDefinition(db, {
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'hi' } }] }] },
    })
    const run = await makeRun(db, { definition: fx, concurrencyKey: null })
    expect(await wakeOf(run.id)).toBeNull()
    const runner = new Runner({ db, registry: createDefaultRegistry(), instanceId: 'wake-index' })
    await runner.tick()
    expect(await runs.statusOf(db, run.id)).toBe('completed')
    expect(await wakeOf(run.id)).toBeNull()
  })
})

describe('reading it', () => {
  it('nextWakeAfter answers the soonest of a key-less scheduled run, a deferred keyed run and an in-flight timer', async () => {
    const fx = await makeDefinition(db)
    const now = new Date()
    const keyless = await makeRun(db, { definition: fx, concurrencyKey: null, scheduledFor: at(3_000, now) })
    const keyed = await makeRun(db, { definition: fx, concurrencyKey: 'k', scheduledFor: at(-1_000, now) })
    const inFlight = await makeRun(db, {
      definition: fx,
      concurrencyKey: null,
      scheduledFor: at(-1_000, now),
    })
    expect(await runs.claimStart(db, inFlight, 'w1', at(4_000, now))).toMatchObject({ claimed: true })
    expect(await runs.deferStart(db, keyed.id, at(5_000, now))).toBe(true)
    // The key-less run's instant is soonest.
    expect((await runs.nextWakeAfter(db, now))?.getTime()).toBe(at(3_000, now).getTime())
    // Past it, the in-flight run's lease, then the deferred keyed run.
    expect((await runs.nextWakeAfter(db, at(3_000, now)))?.getTime()).toBe(at(4_000, now).getTime())
    expect((await runs.nextWakeAfter(db, at(4_000, now)))?.getTime()).toBe(at(5_000, now).getTime())
    expect(await runs.nextWakeAfter(db, at(5_000, now))).toBeNull()
    // The keyed run, held back sooner than the key-less one is due, is soonest.
    expect(await runs.deferStart(db, keyed.id, at(2_000, now))).toBe(true)
    expect((await runs.nextWakeAfter(db, now))?.getTime()).toBe(at(2_000, now).getTime())
    // A finished run is no one's wake-up.
    expect(await runs.transition(db, keyless.id, 'scheduled', 'cancelled')).toBe(true)
    expect((await runs.nextWakeAfter(db, at(2_000, now)))?.getTime()).toBe(at(4_000, now).getTime())
  })

  it('both probes of nextWakeAfter and the start’s locking read are ranges of their indexes', async () => {
    const fx = await makeDefinition(db)
    for (const offset of [-2000, -1000, 5000, 6000, 7000])
      await makeRun(db, { definition: fx, concurrencyKey: null, scheduledFor: at(offset) })
    const seen: { sql: string; args: readonly SqlValue[] | undefined }[] = []
    const recording = wrapStatements(db, 'execute', (real) => (sql, args) => {
      seen.push({ sql, args })
      return real(sql, args)
    })
    const now = new Date()
    await runs.nextWakeAfter(recording, now)
    expect(await runs.lockDueToStart(recording, now, 100)).toHaveLength(2)
    const [probes, lock] = seen
    const plan = await db.query<{ table: string; type: string; key: string | null }>(
      `EXPLAIN ${probes?.sql}`,
      probes?.args as never,
    )
    const accesses = plan.filter((p) => p.table === 'event_runs').map((p) => `${p.type} ${p.key}`)
    expect(accesses.sort()).toEqual(['range idx_evrun_due', 'range idx_evrun_wake'])
    const [locking] = await db.query<{ type: string; key: string | null }>(
      `EXPLAIN ${lock?.sql}`,
      lock?.args as never,
    )
    expect(locking).toMatchObject({ type: 'range', key: 'idx_evrun_due' })
  })
})
