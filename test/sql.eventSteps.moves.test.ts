/**
 * sql/eventSteps/ against a real MariaDB: the guarded moves of a step (begin
 * and its leases, complete, park, sleep/resume, retry, fail, skip, cancel),
 * each refused from a state it does not leave, and step reclaim (invariant 10:
 * it releases the lease only).
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { useTestDb } from './helpers/db.ts'
import { nth, stepHelpers } from './helpers/eventSteps.ts'
import { at, resetRuns } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  // reclaimStale spans every step.
  await resetRuns(db)
})

const { get, startedRun, begun } = stepHelpers(() => db)

/** The steps of a fresh started run with `n` pending steps. */
async function fresh(n: number): Promise<StepRow[]> {
  return (await startedRun(n)).steps
}

describe('begin', () => {
  it('starts an attempt: running, leased, attempts + 1', async () => {
    const s = nth(await fresh(1), 0)
    const lease = at(30_000)
    expect(await steps.begin(db, s.id, 'w1', lease, new Date())).toBe(true)
    const row = await get(s.id)
    expect(row).toMatchObject({
      status: 'running',
      attempts: 1,
      claimedBy: 'w1',
      parked: false,
      wakeAt: null,
    })
    // The lease's expiry is on the database's clock: NOW(3) + 30 s.
    expect(Math.abs((row.claimExpiresAt?.getTime() ?? 0) - lease.getTime())).toBeLessThan(1000)
    expect(row.startedAt).toBeInstanceOf(Date)
  })

  it('is refused while a live lease is held, by another owner or the same one; after expiry it re-runs (attempts + 1)', async () => {
    const s = nth(await fresh(1), 0)
    const T = Date.now()
    expect(await steps.begin(db, s.id, 'w1', at(300, T), new Date(T))).toBe(true)
    // Lease expiry is judged on the database's clock: a caller whose clock runs a minute ahead is refused too.
    expect(await steps.begin(db, s.id, 'w2', at(60_000, T), new Date(T))).toBe(false)
    expect(await steps.begin(db, s.id, 'w2', at(120_000, T), at(60_000, T))).toBe(false)
    expect(await steps.begin(db, s.id, 'w1', at(30_000, T), new Date(T))).toBe(false)
    expect(await get(s.id)).toMatchObject({ attempts: 1, claimedBy: 'w1' })
    await new Promise((r) => setTimeout(r, 350))
    expect(await steps.begin(db, s.id, 'w2', at(30_000), new Date())).toBe(true)
    expect(await get(s.id)).toMatchObject({ status: 'running', attempts: 2, claimedBy: 'w2' })
  })

  it('is refused for a step of a run that no longer runs (paused, cancelled); resumeMany too', async () => {
    for (const status of ['paused', 'cancelled'] as const) {
      const { run, steps: made } = await startedRun(1)
      const s = nth(made, 0)
      await db.run('UPDATE event_runs SET status = ? WHERE id = ?', [status, run.id])
      expect(await steps.beginMany(db, [s.id], 'w1', at(30_000), new Date())).toBe(0)
      expect(await get(s.id)).toMatchObject({ status: 'pending', attempts: 0 })
    }
    // A timer that came due on a paused run is not re-entered either.
    const { run, steps: made } = await startedRun(1)
    const s = nth(made, 0)
    await begun(s)
    expect(await steps.sleep(db, s.id, new Date(Date.now() - 1000))).toBe(true)
    await db.run("UPDATE event_runs SET status = 'paused' WHERE id = ?", [run.id])
    expect(await steps.resumeMany(db, [s.id], 'w1', at(30_000), new Date())).toBe(0)
    await db.run("UPDATE event_runs SET status = 'running' WHERE id = ?", [run.id])
    expect(await steps.resumeMany(db, [s.id], 'w1', at(30_000), new Date())).toBe(1)
  })

  it('is refused for parked, sleeping and finished steps', async () => {
    const [p, sl, done] = await fresh(3)
    for (const s of [p, sl, done] as StepRow[]) await begun(s)
    expect(await steps.park(db, (p as StepRow).id, null)).toBe(true)
    expect(await steps.sleep(db, (sl as StepRow).id, at(60_000))).toBe(true)
    expect(await steps.complete(db, (done as StepRow).id, { ok: true })).toBe(true)
    const later = at(3_600_000)
    for (const s of [p, sl, done] as StepRow[]) {
      expect(await steps.begin(db, s.id, 'w2', at(30_000, later), later)).toBe(false)
      expect((await get(s.id)).attempts).toBe(1)
    }
  })

  // DESIGN.md: a step in retry backoff is *sleeping* (`pending`, parked = 0,
  // wake_at in the future), and begin's own doc says sleeping steps are refused.
  // A begin that ignores the backoff's wake_at lets any tick that read the step
  // before scheduleRetry re-run it at once, defeating the exponential backoff.
  it('is refused for a step in retry backoff until its wake_at, then begins the next attempt', async () => {
    const s = nth(await fresh(1), 0)
    await begun(s)
    const wake = at(5_000)
    expect(await steps.scheduleRetry(db, s.id, 'HTTP 503', wake)).toBe(true)
    expect(await steps.begin(db, s.id, 'w1', at(30_000), at(-1, wake))).toBe(false)
    expect(await get(s.id)).toMatchObject({ status: 'pending', attempts: 1, wakeAt: wake })
    expect(await steps.begin(db, s.id, 'w1', at(30_000, wake), wake)).toBe(true)
    expect(await get(s.id)).toMatchObject({
      status: 'running',
      attempts: 2,
      wakeAt: null,
      lastError: 'HTTP 503',
    })
  })
})

describe('the moves of a running step', () => {
  it('complete: running → completed once; never from pending or a finished step', async () => {
    const [a, b] = await fresh(2)
    expect(await steps.complete(db, (a as StepRow).id, 1)).toBe(false) // pending
    await begun(a as StepRow)
    expect(await steps.complete(db, (a as StepRow).id, { n: 1 })).toBe(true)
    expect(await get((a as StepRow).id)).toMatchObject({
      status: 'completed',
      result: { n: 1 },
      claimedBy: null,
    })
    expect((await get((a as StepRow).id)).endedAt).toBeInstanceOf(Date)
    expect(await steps.complete(db, (a as StepRow).id, { n: 2 })).toBe(false)
    expect((await get((a as StepRow).id)).result).toEqual({ n: 1 })
    await begun(b as StepRow)
    expect(await steps.skip(db, (b as StepRow).id, 'operator said so')).toBe(true)
    expect(await steps.complete(db, (b as StepRow).id, 'late')).toBe(false) // the skip won
    expect(await get((b as StepRow).id)).toMatchObject({
      status: 'skipped',
      result: { reason: 'operator said so' },
    })
  })

  it('completeMany completes only executing steps', async () => {
    const [a, b, c] = await fresh(3)
    await begun(a as StepRow)
    await begun(b as StepRow)
    expect(
      await steps.completeMany(
        db,
        [a, b, c].map((s) => ({ id: (s as StepRow).id, result: null })),
      ),
    ).toBe(2)
    expect((await get((c as StepRow).id)).status).toBe('pending')
    expect(await steps.completeMany(db, [])).toBe(0)
  })

  it('completeMany finishes a retried step as complete does: its last error is cleared, each result its own', async () => {
    const [a, b] = await fresh(2)
    for (const s of [a, b] as StepRow[]) {
      await begun(s)
      expect(await steps.scheduleRetry(db, s.id, 'HTTP 503', at(-1))).toBe(true)
      await begun(s)
    }
    expect(
      await steps.completeMany(db, [
        { id: (a as StepRow).id, result: null },
        { id: (b as StepRow).id, result: { status: 200 } },
      ]),
    ).toBe(2)
    expect(await get((a as StepRow).id)).toMatchObject({ status: 'completed', lastError: null, result: null })
    expect(await get((b as StepRow).id)).toMatchObject({
      status: 'completed',
      lastError: null,
      result: { status: 200 },
    })
  })

  it('park: running → parked with no lease; refused when not running', async () => {
    const [a, b] = await fresh(2)
    expect(await steps.park(db, (a as StepRow).id, null)).toBe(false)
    await begun(a as StepRow)
    const until = at(600_000)
    expect(await steps.park(db, (a as StepRow).id, until)).toBe(true)
    expect(await get((a as StepRow).id)).toMatchObject({
      status: 'running',
      parked: true,
      wakeAt: until,
      claimedBy: null,
      claimExpiresAt: null,
      attempts: 1,
    })
    await begun(b as StepRow)
    await steps.complete(db, (b as StepRow).id, null)
    expect(await steps.park(db, (b as StepRow).id, null)).toBe(false)
  })

  it('sleep: running → sleeping (not parked, no lease); resume re-enters when due without spending an attempt', async () => {
    const s = nth(await fresh(1), 0)
    await begun(s)
    const wake = at(10_000)
    expect(await steps.sleep(db, s.id, wake)).toBe(true)
    expect(await get(s.id)).toMatchObject({ status: 'running', parked: false, wakeAt: wake, claimedBy: null })
    expect(await steps.resume(db, s.id, 'w2', at(30_000, wake), at(-1, wake))).toBe(false)
    expect(await steps.resume(db, s.id, 'w2', at(30_000, wake), wake)).toBe(true)
    const row = await get(s.id)
    expect(row).toMatchObject({ status: 'running', attempts: 1, claimedBy: 'w2', wakeAt: wake })
    // Its lease is live (30 s on the database's clock): nobody re-enters until it lapses.
    expect(await steps.resume(db, s.id, 'w3', at(60_000, wake), at(30_001, wake))).toBe(false)
    await db.run('UPDATE event_run_steps SET claim_expires_at = NOW(3) - INTERVAL 1 SECOND WHERE id = ?', [
      s.id,
    ])
    expect(await steps.resume(db, s.id, 'w3', at(60_000, wake), at(1, wake))).toBe(true)
    expect((await get(s.id)).attempts).toBe(1)
    expect(await steps.complete(db, s.id, { waited: true })).toBe(true)
    expect(await get(s.id)).toMatchObject({ status: 'completed', wakeAt: null })
    expect(await steps.sleep(db, s.id, wake)).toBe(false)
  })

  it('resume: a parked cue re-enters only when its timeout passed; never one without a timeout', async () => {
    const [timed, open] = await fresh(2)
    await begun(timed as StepRow)
    await begun(open as StepRow)
    const timeout = at(5_000)
    await steps.park(db, (timed as StepRow).id, timeout)
    await steps.park(db, (open as StepRow).id, null)
    expect(await steps.resume(db, (timed as StepRow).id, 'w', at(30_000), at(-1, timeout))).toBe(false)
    expect(await steps.resume(db, (timed as StepRow).id, 'w', at(30_000, timeout), timeout)).toBe(true)
    expect(await get((timed as StepRow).id)).toMatchObject({ parked: false, claimedBy: 'w', attempts: 1 })
    const far = at(365 * 86_400_000)
    expect(await steps.resume(db, (open as StepRow).id, 'w', far, far)).toBe(false)
    expect((await get((open as StepRow).id)).parked).toBe(true)
  })

  it('scheduleRetry: running → pending with error and wake_at; refused when not running', async () => {
    const s = nth(await fresh(1), 0)
    expect(await steps.scheduleRetry(db, s.id, 'nope', at(1000))).toBe(false)
    await begun(s)
    const wake = at(2_000)
    expect(await steps.scheduleRetry(db, s.id, 'e'.repeat(1500), wake)).toBe(true)
    const row = await get(s.id)
    expect(row).toMatchObject({
      status: 'pending',
      parked: false,
      wakeAt: wake,
      claimedBy: null,
      attempts: 1,
    })
    expect(row.lastError).toHaveLength(1000)
    expect(await steps.scheduleRetry(db, s.id, 'again', wake)).toBe(false)
  })

  it('fail: running → failed once; a failed step cannot be completed, skipped or resolved', async () => {
    const s = nth(await fresh(1), 0)
    expect(await steps.fail(db, s.id, 'x')).toBe(false)
    await begun(s)
    expect(await steps.fail(db, s.id, 'HTTP 400')).toBe(true)
    expect(await get(s.id)).toMatchObject({
      status: 'failed',
      lastError: 'HTTP 400',
      claimedBy: null,
      wakeAt: null,
    })
    expect(await steps.fail(db, s.id, 'y')).toBe(false)
    expect(await steps.complete(db, s.id, null)).toBe(false)
    expect(await steps.skip(db, s.id, null)).toBe(false)
    expect(await steps.resolveParked(db, s.id, null)).toBe(false)
    expect((await get(s.id)).lastError).toBe('HTTP 400')
  })

  it('resolveParked completes a parked cue once; refused for pending, executing, sleeping and done steps', async () => {
    const [pending, executing, sleeping, parked] = (await fresh(4)) as [StepRow, StepRow, StepRow, StepRow]
    await begun(executing)
    await begun(sleeping)
    await begun(parked)
    await steps.sleep(db, sleeping.id, at(60_000))
    await steps.park(db, parked.id, null)
    for (const s of [pending, executing, sleeping]) {
      const before = await get(s.id)
      expect(await steps.resolveParked(db, s.id, { note: 'go' })).toBe(false)
      expect(await get(s.id)).toEqual(before)
    }
    expect(await steps.resolveParked(db, parked.id, { note: 'gates open' })).toBe(true)
    expect(await get(parked.id)).toMatchObject({
      status: 'completed',
      parked: false,
      result: { note: 'gates open' },
    })
    expect(await steps.resolveParked(db, parked.id, { note: 'again' })).toBe(false)
  })

  it('skip: any unfinished step (pending, executing, sleeping, parked); never a finished one', async () => {
    const list = (await fresh(6)) as StepRow[]
    const [pending, executing, sleeping, parked, completed, backoff] = list as [
      StepRow,
      StepRow,
      StepRow,
      StepRow,
      StepRow,
      StepRow,
    ]
    for (const s of [executing, sleeping, parked, completed, backoff]) await begun(s)
    await steps.sleep(db, sleeping.id, at(60_000))
    await steps.park(db, parked.id, null)
    await steps.complete(db, completed.id, { done: 1 })
    await steps.scheduleRetry(db, backoff.id, 'err', at(60_000))
    for (const s of [pending, executing, sleeping, parked, backoff]) {
      expect(await steps.skip(db, s.id, null)).toBe(true)
      expect(await get(s.id)).toMatchObject({
        status: 'skipped',
        parked: false,
        wakeAt: null,
        claimedBy: null,
      })
      expect(await steps.skip(db, s.id, 'twice')).toBe(false)
    }
    expect(await steps.skip(db, completed.id, 'late')).toBe(false)
    expect(await get(completed.id)).toMatchObject({ status: 'completed', result: { done: 1 } })
  })

  it('cancelUnfinished cancels pending and running steps of that run only', async () => {
    const { run, steps: list } = await startedRun(6)
    const other = nth(await fresh(1), 0)
    const [done, skipped, parked, sleeping, executing] = list as [StepRow, StepRow, StepRow, StepRow, StepRow]
    for (const s of [done, parked, sleeping, executing]) await begun(s)
    await steps.complete(db, done.id, { ok: 1 })
    await steps.skip(db, skipped.id, null)
    await steps.park(db, parked.id, null)
    await steps.sleep(db, sleeping.id, at(60_000))
    expect(await steps.cancelUnfinished(db, run.id)).toBe(4) // parked, sleeping, executing, pending(seq 5)
    const after = await steps.listForRun(db, run.id)
    expect(after.map((s) => s.status)).toEqual([
      'completed',
      'skipped',
      'cancelled',
      'cancelled',
      'cancelled',
      'cancelled',
    ])
    for (const s of after.slice(2)) expect(s).toMatchObject({ parked: false, wakeAt: null, claimedBy: null })
    expect(nth(after, 0).result).toEqual({ ok: 1 })
    expect((await get(other.id)).status).toBe('pending')
    expect(await steps.cancelUnfinished(db, run.id)).toBe(0)
  })
})

describe('invariant 10 (steps): reclaim releases the lease only', () => {
  it('releases expired step leases, keeps status and attempts; the next begin re-runs the step', async () => {
    const { run, steps: made } = await startedRun(3)
    const [stale, live, parked] = made as [StepRow, StepRow, StepRow]
    // Steps run only once their run has started; the sweep looks at started runs' steps.
    await runs.transition(db, run.id, 'scheduled', 'running')
    const T = Date.now()
    // A lease of 1 ms has run out by the time reclaim runs (on the database's clock).
    expect(await steps.begin(db, stale.id, 'crashed', at(1, T), new Date(T))).toBe(true)
    expect(await steps.begin(db, live.id, 'alive', at(60_000, T), new Date(T))).toBe(true)
    expect(await steps.begin(db, parked.id, 'w', at(60_000, T), new Date(T))).toBe(true)
    await steps.park(db, parked.id, null)
    const parkedBefore = await get(parked.id)
    await new Promise((r) => setTimeout(r, 20))

    expect(await steps.reclaimStale(db)).toBe(1)
    expect(await get(stale.id)).toMatchObject({
      status: 'running',
      attempts: 1,
      claimedBy: null,
      claimExpiresAt: null,
    })
    expect(await get(live.id)).toMatchObject({ status: 'running', attempts: 1, claimedBy: 'alive' })
    expect(await get(parked.id)).toEqual(parkedBefore)
    expect(await steps.reclaimStale(db)).toBe(0)
    // At-least-once: the next owner runs it again as the next attempt.
    expect(await steps.begin(db, stale.id, 'w2', at(30_000, T), at(2_000, T))).toBe(true)
    expect((await get(stale.id)).attempts).toBe(2)
  })
})
