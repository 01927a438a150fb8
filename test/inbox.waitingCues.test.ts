/**
 * How the live inbox reads the waiting cues (sql/waitingCues.ts,
 * src/api/waitingCueReader.ts), against the real database:
 *
 * - who a cue is for, decided in code from one read for everybody, is what
 *   the per-caller SQL filter (JSON_OVERLAPS) decides, case and accents
 *   included;
 * - the narrow read is cut at its limit, says so, and flags rows changed
 *   less than SETTLED_MS ago;
 * - copies kept between polls never stand for a row that changed: a run
 *   whose `updated_at` moved is read again, a row changed in the same
 *   millisecond (so `updated_at` did not move) while still fresh is read
 *   again, and a run's count of waiting cues is this poll's even when the
 *   run's copy is kept;
 * - an owner whose cues lie beyond the poll's read limit still gets them;
 * - the narrow read walks the waiting-steps index in order (no sort).
 */
import { beforeEach, describe, expect, it } from 'vitest'
import { listWaitingForEach } from '../sql/cueLadders.ts'
import type { Db } from '../sql/db.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { isFor, listWaitingCueKeys, waitingCueKeysSql } from '../sql/waitingCues.ts'
import { type Inbox, InboxFeed } from '../src/api/inboxFeed.ts'
import { WaitingCueReader } from '../src/api/waitingCueReader.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRunWithSteps, resetRuns } from './helpers/fixtures.ts'
import { waitFor } from './helpers/runnerHarness.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
  await db.query('DELETE FROM cue_ladders')
})

/**
 * `n` cues parked on one new run, oldest first (a millisecond apart), each
 * with a ladder for `assignees` (JSON text) or none when `assignees` is null.
 */
async function parkCues(n: number, assignees: string | null = '[]'): Promise<StepRow[]> {
  const fx = await makeDefinition(db)
  const { steps } = await makeRunWithSteps(db, n, { definition: fx })
  for (const step of steps) {
    await db.query(
      `UPDATE event_run_steps SET status = 'running', parked = 1,
          started_at = NOW(3) - INTERVAL 1 HOUR + INTERVAL ? MICROSECOND WHERE id = ?`,
      [step.id * 1000, step.id],
    )
    if (assignees !== null) {
      await db.query(
        `INSERT INTO cue_ladders (step_id, run_id, prompt, opened_at, assignees)
         SELECT id, run_id, 'GO?', started_at, ? FROM event_run_steps WHERE id = ?`,
        [assignees, step.id],
      )
    }
  }
  return steps
}

/** Every row of the run's steps and the run stamped `ms` in the past, as if changed then. */
async function age(runId: number, ms: number): Promise<void> {
  const at = `NOW(3) - INTERVAL ${ms * 1000} MICROSECOND`
  await db.query(`UPDATE event_run_steps SET updated_at = ${at} WHERE run_id = ?`, [runId])
  await db.query(`UPDATE event_runs SET updated_at = ${at} WHERE id = ?`, [runId])
}

describe('who a cue is for', () => {
  it('is decided in code exactly as the per-caller SQL filter decides it', async () => {
    const ladders = [
      null, // no ladder: anyone
      '[]',
      '["Ana"]',
      '["ana"]',
      '["team:crew"]',
      '["Zoë"]',
      '["Zoe"]',
      '["Ana", "Bob"]',
      '"Bob"', // a scalar, as JSON_OVERLAPS reads it
    ]
    for (const a of ladders) await parkCues(1, a)
    const callers = [['Ana'], ['ana', 'team:crew'], ['Bob'], ['Zoë'], ['Zoe', 'team:Crew'], ['nobody']]
    const { keys, complete } = await listWaitingCueKeys(db, 100)
    expect(complete).toBe(true)
    expect(keys).toHaveLength(ladders.length)
    const bySql = await listWaitingForEach(
      db,
      callers.map((identities) => ({ limit: 100, identities })),
    )
    for (const [i, identities] of callers.entries()) {
      const inCode = keys.filter((k) => isFor(k.assignees, new Set(identities))).map((k) => k.stepId)
      expect(inCode, identities.join(',')).toEqual(bySql[i]?.map((s) => s.id))
    }
    // Not vacuous: the callers see different inboxes.
    expect(new Set(bySql.map((steps) => steps.length)).size).toBeGreaterThan(2)
  })
})

describe('the narrow read', () => {
  it('is cut at its limit and says so, oldest first', async () => {
    const steps = await parkCues(5)
    const cut = await listWaitingCueKeys(db, 3)
    expect(cut.complete).toBe(false)
    expect(cut.keys.map((k) => k.stepId)).toEqual(steps.slice(0, 3).map((s) => s.id))
    const whole = await listWaitingCueKeys(db, 5)
    expect(whole.complete).toBe(true)
    expect(whole.keys).toHaveLength(5)
  })

  it('flags rows changed within SETTLED_MS as not settled', async () => {
    const [fresh] = await parkCues(1)
    const [old] = await parkCues(1)
    await age(old?.runId as number, 10_000)
    const { keys } = await listWaitingCueKeys(db, 10)
    const of = (id: number) => keys.find((k) => k.stepId === id)
    expect(of(fresh?.id as number)).toMatchObject({ stepSettled: false, runSettled: false })
    expect(of(old?.id as number)).toMatchObject({ stepSettled: true, runSettled: true })
  })

  it('walks the waiting-steps index in order, without a sort', async () => {
    await parkCues(3)
    const plan = await db.query<{ table: string; key: string | null; Extra: string | null }>(
      `EXPLAIN ${waitingCueKeysSql(5000)}`,
    )
    expect(plan[0]).toMatchObject({ table: 's', key: 'idx_evstep_waiting_since' })
    expect(plan.map((p) => p.Extra ?? '').join(' ')).not.toMatch(/filesort|temporary/)
  })
})

describe('copies kept between polls', () => {
  it('are used only for settled rows whose updated_at has not moved', async () => {
    const steps = await parkCues(2)
    const runId = steps[0]?.runId as number
    await age(runId, 10_000)
    const reader = new WaitingCueReader()
    const first = await reader.read(db, 100)
    expect(first.cues).toHaveLength(2)
    expect(first.runs[0]).toMatchObject({ id: runId, waitingSteps: 2, health: 'ok' })
    expect(reader.fullReads).toEqual({ steps: 2, runs: 1 })

    // Nothing changed: nothing read in full.
    await reader.read(db, 100)
    expect(reader.fullReads).toEqual({ steps: 2, runs: 1 })

    // The run changed (updated_at moves): read again, and the change shows.
    await db.query(`UPDATE event_runs SET health = 'degraded' WHERE id = ?`, [runId])
    const changed = await reader.read(db, 100)
    expect(reader.fullReads).toEqual({ steps: 2, runs: 2 })
    expect(changed.runs[0]?.health).toBe('degraded')
  })

  it('never stand for a fresh row changed again in the same millisecond', async () => {
    const [step] = await parkCues(1)
    const runId = step?.runId as number
    const reader = new WaitingCueReader()
    expect((await reader.read(db, 100)).runs[0]?.health).toBe('ok')
    // A second change that keeps updated_at, as one in the same millisecond would.
    await db.query(`UPDATE event_runs SET health = 'degraded', updated_at = updated_at WHERE id = ?`, [runId])
    expect((await reader.read(db, 100)).runs[0]?.health).toBe('degraded')
  })

  it('give a kept run this poll’s count of waiting cues', async () => {
    const steps = await parkCues(2)
    const runId = steps[0]?.runId as number
    await age(runId, 10_000)
    const reader = new WaitingCueReader()
    await reader.read(db, 100)
    await reader.read(db, 100) // the copies are kept now
    // One cue answered: the step leaves the waiting cues; the run's row is untouched.
    await db.query(`UPDATE event_run_steps SET status = 'completed', parked = 0 WHERE id = ?`, [
      steps[0]?.id as number,
    ])
    const after = await reader.read(db, 100)
    expect(after.cues.map((c) => c.step.id)).toEqual([steps[1]?.id])
    expect(after.runs).toEqual([expect.objectContaining({ id: runId, waitingSteps: 1 })])
    expect(reader.fullReads.runs).toBe(1)
  })

  it('count a run’s cues beyond the limit when the read is cut', async () => {
    const steps = await parkCues(3)
    const reader = new WaitingCueReader()
    const cut = await reader.read(db, 2)
    expect(cut.complete).toBe(false)
    expect(cut.cues.map((c) => c.step.id)).toEqual([steps[0]?.id, steps[1]?.id])
    expect(cut.runs[0]?.waitingSteps).toBe(3)
  })
})

describe('an owner whose cues lie beyond the poll’s read', () => {
  it('still gets them, read on their own', async () => {
    await parkCues(4, '["someone-else"]')
    const [mine] = await parkCues(1, '["me"]')
    const feed = new InboxFeed({ db, intervalMs: 60_000, waitingReadLimit: 2 })
    const latest: Inbox[] = []
    const stream = await feed.watch(10, ['me'])
    const reading = (async () => {
      for await (const inbox of stream) latest.push(inbox)
    })()
    try {
      await waitFor(() => latest.length > 0 || null)
      expect(latest[0]?.steps.map((s) => s.id)).toEqual([mine?.id])
      // A poll (read limit 2, four older cues for someone else) finds the new one too.
      const [another] = await parkCues(1, '["me"]')
      feed.wake()
      await waitFor(() => latest.length > 1 || null)
      expect(latest[1]?.steps.map((s) => s.id)).toEqual([mine?.id, another?.id])
      expect(await latest[1]?.loaders.run.load(another?.runId as number)).toMatchObject({
        id: another?.runId,
      })
    } finally {
      await feed.close()
      await reading
    }
  })
})
