/**
 * sql/eventSteps/ and the run reads beside it against a real MariaDB, on the
 * path of a cue: an answer's first read (getStepWithRun), its hand-over to a
 * runner (claimAnswered), and the waiting counts (invariant 13: parked cues
 * only, never timers or backoffs).
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { useTestDb } from './helpers/db.ts'
import { stepHelpers } from './helpers/eventSteps.ts'
import { at, makeDefinition, makeRun, makeRunWithSteps, resetRuns, sleepMs } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  // waitingSummary / listWaiting span every step.
  await resetRuns(db)
})

const { get, startedRun, begun } = stepHelpers(() => db)

describe("getStepWithRun (a cue answer's first read)", () => {
  it('answers the step and its run, field for field as their own reads do, in one statement', async () => {
    const { run, steps: made } = await makeRunWithSteps(db, 2, { scope: 'stage-left' })
    const step = made[1] as StepRow
    const before = db.stats.statements
    const found = await runs.getStepWithRun(db, step.id)
    expect(db.stats.statements - before).toBe(1)
    // The step's columns and the run's share names (id, status, params, wake_at…): none may leak into the other.
    expect(found?.step).toEqual(await get(step.id))
    const { waitingSteps, versionNumber, ...ownRun } = run
    expect(found?.run).toEqual(ownRun)
    expect(found?.run.id).toBe(run.id)
    expect(found?.run.scope).toBe('stage-left')
    expect(found?.run.definitionTitle).toBe(run.definitionTitle)
    expect(await runs.getStepWithRun(db, step.id + 1000)).toBeNull()
  })

  it('answers the next step still to run after it, as the runner would read it, or null past the last', async () => {
    const { steps: made } = await startedRun(4)
    const [first, second, third, fourth] = made as [StepRow, StepRow, StepRow, StepRow]
    expect((await runs.getStepWithRun(db, first.id))?.next).toEqual(await get(second.id))
    // A step after it already done (skipped ahead) is passed over; one before it is not its next.
    expect(await steps.skip(db, second.id, 'not needed')).toBe(true)
    expect((await runs.getStepWithRun(db, first.id))?.next).toEqual(await get(third.id))
    expect((await runs.getStepWithRun(db, third.id))?.next).toEqual(await get(fourth.id))
    expect((await runs.getStepWithRun(db, fourth.id))?.next).toBeNull()
  })
})

describe("claimAnswered (an answer's hand-over to its runner)", () => {
  const claimFor = (owner: string) => {
    const now = new Date()
    return { owner, token: `${owner}:1:a`, leaseUntil: new Date(now.getTime() + 45_000), now }
  }
  /** A run moved straight to `status` (materialise makes them scheduled). */
  const runIn = async (status: string) => {
    const run = await makeRun(db)
    await db.run('UPDATE event_runs SET status = ? WHERE id = ?', [status, run.id])
    return run
  }
  /** `owner` holds run `id`, its lease running out in `seconds` (negative: already ran out). */
  const heldBy = (id: number, owner: string, seconds: number) =>
    db.run(
      'UPDATE event_runs SET claimed_by = ?, claim_expires_at = NOW(3) + INTERVAL ? SECOND WHERE id = ?',
      [owner, seconds, id],
    )
  const claimOf = async (id: number) =>
    (
      await db.query<{ c: string | null; t: string | null; w: Date | null; live: number }>(
        'SELECT claimed_by AS c, claim_token AS t, wake_at AS w, claim_expires_at > NOW(3) + INTERVAL 40 SECOND AS live FROM event_runs WHERE id = ?',
        [id],
      )
    )[0]

  it('claims a running run nobody holds, for the lease asked, its wake_at at the lease’s end', async () => {
    const run = await runIn('running')
    const claim = claimFor('w1')
    expect(await runs.claimAnswered(db, run.id, 'running', claim)).toBe(true)
    expect(await claimOf(run.id)).toEqual({ c: 'w1', t: 'w1:1:a', w: claim.leaseUntil, live: 1 })
  })

  it('takes no run another holds, none whose status moved since it was read, none paused', async () => {
    const held = await runIn('running')
    await heldBy(held.id, 'w2', 10)
    expect(await runs.claimAnswered(db, held.id, 'running', claimFor('w1'))).toBe(false)
    expect((await claimOf(held.id))?.c).toBe('w2')
    const ending = await runIn('ending')
    expect(await runs.claimAnswered(db, ending.id, 'running', claimFor('w1'))).toBe(false)
    expect(await runs.claimAnswered(db, ending.id, 'ending', claimFor('w1'))).toBe(true)
    const paused = await runIn('paused')
    expect(await runs.claimAnswered(db, paused.id, 'paused', claimFor('w1'))).toBe(false)
    expect((await claimOf(paused.id))?.c).toBeNull()
  })

  it('takes a run whose holder’s lease ran out', async () => {
    const run = await runIn('running')
    await heldBy(run.id, 'w2', -1)
    expect(await runs.claimAnswered(db, run.id, 'running', claimFor('w1'))).toBe(true)
    expect((await claimOf(run.id))?.c).toBe('w1')
  })
})

describe('invariant 13: waiting counts parked cues only', () => {
  it('list, getById, statusesOf, waitingSummary and listWaiting never count timers or backoffs', async () => {
    const fx = await makeDefinition(db)
    const r1 = await startedRun(4, { definition: fx })
    const r2 = await startedRun(4, { definition: fx })
    const r3 = await startedRun(2, { definition: fx })
    const [cue1, wait1, retry1, exec1] = r1.steps as [StepRow, StepRow, StepRow, StepRow]
    const [wait2, retry2, cue2] = r2.steps as [StepRow, StepRow, StepRow]
    const [wait3, retry3] = r3.steps as [StepRow, StepRow]

    // Begin in a known order so started_at orders the cues (cue1 older).
    for (const s of [cue1, wait1, retry1, exec1, wait2, retry2, wait3, retry3]) await begun(s)
    await sleepMs(5)
    await begun(cue2)
    expect(await steps.park(db, cue1.id, null)).toBe(true)
    expect(await steps.park(db, cue2.id, at(600_000))).toBe(true) // a cue with a timeout is still waiting
    for (const s of [wait1, wait2, wait3]) expect(await steps.sleep(db, s.id, at(600_000))).toBe(true)
    for (const s of [retry1, retry2, retry3])
      expect(await steps.scheduleRetry(db, s.id, 'HTTP 503', at(2_000))).toBe(true)

    const expectCounts = async (c1: number, c2: number) => {
      const byId = new Map(
        (await listRuns(db, { definitionId: fx.def.id })).map((r) => [r.id, r.waitingSteps]),
      )
      expect([byId.get(r1.run.id), byId.get(r2.run.id), byId.get(r3.run.id)]).toEqual([c1, c2, 0])
      expect((await runs.getById(db, r1.run.id))?.waitingSteps).toBe(c1)
      const snaps = new Map(
        (await runs.statusesOf(db, [r1.run.id, r2.run.id, r3.run.id])).map((s) => [s.id, s.waitingSteps]),
      )
      expect([snaps.get(r1.run.id), snaps.get(r2.run.id), snaps.get(r3.run.id)]).toEqual([c1, c2, 0])
      expect((await steps.waitingSummary(db)).count).toBe(c1 + c2)
    }

    await expectCounts(1, 1)
    const summary = await steps.waitingSummary(db)
    expect(summary.oldestAt?.getTime()).toBe((await get(cue1.id)).startedAt?.getTime())
    expect((await steps.listWaiting(db)).map((s) => s.id)).toEqual([cue1.id, cue2.id])
    expect((await steps.listWaiting(db, 1)).map((s) => s.id)).toEqual([cue1.id])

    // A timer that came due and was re-entered is still not waiting.
    expect(await steps.resume(db, wait3.id, 'w', at(700_000), at(600_000))).toBe(true)
    await expectCounts(1, 1)

    // Resolving a cue removes it from every count.
    expect(await steps.resolveParked(db, cue1.id, { note: 'done' })).toBe(true)
    await expectCounts(0, 1)
    expect((await steps.listWaiting(db)).map((s) => s.id)).toEqual([cue2.id])
    expect(await runs.statusesOf(db, [])).toEqual([])

    // The waiting index holds the parked cue and no other step as non-NULL
    // (migration 0023), so a begin or an end of any other step leaves its entry.
    const nonNull = await db.query<{ id: number }>(
      `SELECT id FROM event_run_steps FORCE INDEX (idx_evstep_waiting_since) WHERE waiting_since IS NOT NULL`,
    )
    expect(nonNull.map((r) => Number(r.id))).toEqual([cue2.id])
    const cols = await db.query<{ COLUMN_NAME: string }>(
      `SELECT COLUMN_NAME FROM information_schema.STATISTICS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'event_run_steps' AND INDEX_NAME LIKE 'idx_evstep_waiting%'`,
    )
    expect(cols.map((c) => c.COLUMN_NAME)).toEqual(['waiting_since'])
    for (const sql of [
      `EXPLAIN SELECT COUNT(*), MIN(waiting_since) FROM event_run_steps WHERE waiting_since IS NOT NULL`,
      `EXPLAIN SELECT s.id FROM event_run_steps s WHERE s.waiting_since IS NOT NULL ORDER BY s.waiting_since, s.id LIMIT 100`,
    ]) {
      const [plan] = await db.query<{ key: string; Extra: string }>(sql)
      expect(plan?.key, sql).toBe('idx_evstep_waiting_since')
      expect(plan?.Extra ?? '', sql).not.toMatch(/filesort/)
    }
  })
})
