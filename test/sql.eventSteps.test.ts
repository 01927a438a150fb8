/**
 * sql/eventSteps/ against a real MariaDB: idempotent expansion, the guarded
 * moves of a step, next-step selection, step reclaim (invariant 10) and the
 * waiting counts (invariant 13: parked cues only, never timers or backoffs).
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { useTestDb } from './helpers/db.ts'
import {
  at,
  countRows,
  makeDefinition,
  makeRun,
  makeRunWithSteps,
  resetRuns,
  sleepMs,
  stepSpecs,
} from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  // waitingSummary / listWaiting span every step.
  await resetRuns(db)
})

const get = async (id: number): Promise<StepRow> => {
  const s = await steps.getById(db, id)
  if (!s) throw new Error(`step ${id} not found`)
  return s
}

/**
 * A run with `n` pending steps, started (`running`): a step begins only
 * while its run runs, as the runner begins them.
 */
async function startedRun(n: number, overrides: Parameters<typeof makeRunWithSteps>[2] = {}) {
  const made = await makeRunWithSteps(db, n, overrides)
  await db.run("UPDATE event_runs SET status = 'running', started_at = NOW(3) WHERE id = ?", [made.run.id])
  return made
}

/** The steps of a fresh started run with `n` pending steps. */
async function fresh(n: number): Promise<StepRow[]> {
  return (await startedRun(n)).steps
}

function nth(list: readonly StepRow[], i: number): StepRow {
  const s = list[i]
  if (!s) throw new Error(`no step ${i}`)
  return s
}

/** Begin a step now with a 30 s lease. */
async function begun(step: StepRow, owner = 'w1'): Promise<void> {
  expect(await steps.begin(db, step.id, owner, at(30_000), new Date())).toBe(true)
}

describe('expand', () => {
  it('is idempotent: a second expansion inserts nothing; an extended one inserts only the new seqs', async () => {
    const run = await makeRun(db)
    const specs = stepSpecs(5, {
      kind: 'core.webhook',
      params: { url: 'https://x.test/' },
      maxAttempts: 3,
      onError: 'degrade',
    })
    expect(await steps.expand(db, [{ runId: run.id, specs }])).toBe(5)
    expect(await steps.expand(db, [{ runId: run.id, specs }])).toBe(0)
    expect(await countRows(db, 'event_run_steps', 'run_id = ?', [run.id])).toBe(5)
    expect(await steps.expand(db, [{ runId: run.id, specs: stepSpecs(7) }])).toBe(2)
    expect(await steps.expand(db, [])).toBe(0)
    expect(await steps.expand(db, [{ runId: run.id, specs: [] }])).toBe(0)
    const list = await steps.listForRun(db, run.id)
    expect(list.map((s) => s.seq)).toEqual([0, 1, 2, 3, 4, 5, 6])
    // The first expansion's rows were not overwritten by the second.
    expect(nth(list, 0)).toMatchObject({
      kind: 'core.webhook',
      params: { url: 'https://x.test/' },
      maxAttempts: 3,
      onError: 'degrade',
      status: 'pending',
      parked: false,
      attempts: 0,
      wakeAt: null,
      claimedBy: null,
    })
  })

  it('expands several runs in one call, idempotently', async () => {
    const a = await makeRun(db)
    const b = await makeRun(db)
    const items = [
      { runId: a.id, specs: stepSpecs(3) },
      { runId: b.id, specs: stepSpecs(2) },
    ]
    expect(await steps.expand(db, items)).toBe(5)
    expect(await steps.expand(db, items)).toBe(0)
    const all = await steps.listForRuns(db, [a.id, b.id])
    expect(all.map((s) => [s.runId, s.seq])).toEqual([
      [a.id, 0],
      [a.id, 1],
      [a.id, 2],
      [b.id, 0],
      [b.id, 1],
    ])
  })
})

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

describe('insertStarted (the start transaction)', () => {
  it.each([
    ['from the INSERT’s first id', false],
    ['read back', true],
  ])('inserts steps in their final state and answers their ids in input order (%s)', async (_, readBack) => {
    const a = await makeRun(db)
    const b = await makeRun(db)
    const at = new Date(Date.now() - 1000)
    const [s0, s1, s2] = stepSpecs(3)
    const rows = [
      { runId: a.id, spec: s0!, done: true },
      { runId: a.id, spec: s1!, done: true },
      { runId: a.id, spec: s2!, done: false },
      { runId: b.id, spec: s0!, done: false },
    ]
    // More rows than one statement carries, so ids span several INSERTs.
    const many = await makeRun(db)
    const bulk = stepSpecs(2500).map((spec) => ({ runId: many.id, spec, done: true }))
    // Steps many runs share (the same spec objects, as runs of one version do)
    // go in set-wise, interleaved here with the rows above.
    const sharing = await Promise.all(Array.from({ length: 12 }, () => makeRun(db)))
    const shared = sharing.flatMap((r, i) => [
      { runId: r.id, spec: s0!, done: true },
      { runId: r.id, spec: s1!, done: i % 3 === 0 },
    ])
    rows.splice(2, 0, ...shared.slice(0, 10))
    rows.push(...shared.slice(10))
    const ids = await db.transaction((tx) => steps.insertStarted(tx, [...rows, ...bulk], at, { readBack }))
    expect(ids).toHaveLength(rows.length + bulk.length)
    expect(new Set(ids).size).toBe(ids.length)
    const byId = new Map(
      (await steps.listForRuns(db, [a.id, b.id, many.id, ...sharing.map((r) => r.id)])).map((st) => [
        st.id,
        st,
      ]),
    )
    ;[...rows, ...bulk].forEach((row, i) => {
      const st = byId.get(ids[i] as number)
      expect(st).toMatchObject({ runId: row.runId, seq: row.spec.seq })
      expect(st).toMatchObject(
        row.done
          ? { status: 'completed', attempts: 1, startedAt: at, endedAt: at }
          : { status: 'pending', attempts: 0, startedAt: null, endedAt: null },
      )
    })
  })

  it('inserts a lone step in one statement, its id the INSERT’s own, under any id lock mode', async () => {
    // Ids handed out before it, so a wrong answer (a guessed id) would show.
    await makeRun(db)
    const run = await makeRun(db)
    const [spec] = stepSpecs(1)
    const before = db.stats.statements
    const [id] = await db.transaction((tx) =>
      steps.insertStarted(tx, [{ runId: run.id, spec: spec!, done: true }], new Date()),
    )
    // BEGIN, the INSERT and COMMIT: no read of the server's id settings.
    expect(db.stats.statements - before).toBe(3)
    expect(await get(id as number)).toMatchObject({ runId: run.id, seq: spec!.seq, status: 'completed' })
  })

  it('refuses a second expansion of a run: the start transaction never expands twice', async () => {
    const run = await makeRun(db)
    const [spec] = stepSpecs(1)
    const row = { runId: run.id, spec: spec!, done: false }
    await db.transaction((tx) => steps.insertStarted(tx, [row], new Date()))
    await expect(db.transaction((tx) => steps.insertStarted(tx, [row], new Date()))).rejects.toThrow(
      /DUP_ENTRY/,
    )
  })
})

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

describe('nextStep / nextSteps', () => {
  it('pick the lowest unfinished seq (not the lowest id); null/absent when all are done', async () => {
    const a = await makeRun(db)
    await db.run("UPDATE event_runs SET status = 'running' WHERE id = ?", [a.id])
    // Inserted in reverse, so id order and seq order disagree.
    await steps.expand(db, [{ runId: a.id, specs: stepSpecs(4).reverse() }])
    const aSteps = await steps.listForRun(db, a.id)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(0)
    await begun(nth(aSteps, 0))
    await steps.complete(db, nth(aSteps, 0).id, null)
    await steps.skip(db, nth(aSteps, 1).id, null)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(2)
    await begun(nth(aSteps, 2))
    await steps.park(db, nth(aSteps, 2).id, null)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(2) // parked is unfinished

    const { run: b, steps: bSteps } = await startedRun(2)
    for (const s of bSteps) await steps.skip(db, s.id, null)
    const { run: c } = await startedRun(3)
    const none = await makeRun(db)
    expect(await steps.nextStep(db, b.id)).toBeNull()
    expect(await steps.nextStep(db, none.id)).toBeNull()

    const map = await steps.nextSteps(db, [a.id, b.id, c.id, none.id])
    expect([...map.keys()].sort((x, y) => x - y)).toEqual([a.id, c.id].sort((x, y) => x - y))
    expect(map.get(a.id)?.seq).toBe(2)
    expect(map.get(a.id)?.id).toBe(nth(aSteps, 2).id)
    expect(map.get(c.id)?.seq).toBe(0)
    expect((await steps.nextSteps(db, [])).size).toBe(0)
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
