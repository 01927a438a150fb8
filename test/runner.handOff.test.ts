/**
 * A GO hands its run to the runner in its own process: the answer's
 * transaction claims the run for that runner, and after the commit the runner
 * begins the next step with no lease and no read of its own (the wake lane
 * sent three statements, lease, read and begin). Where the hand-over cannot
 * apply the answer wakes the run as before: a run still held by its runner
 * (the park's give-back not yet written), a runner stopping, a hand-over that
 * arrives after its runner stopped. The statements are recorded on the
 * runner's own pool, against the real database.
 */
import { afterEach, expect, it } from 'vitest'
import type { Db, Queryable } from '../sql/db.ts'
import { claimAnswered } from '../sql/eventRuns/handOff.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { recordStatements, useTestDb, wrapStatements } from './helpers/db.ts'
import { makeRun } from './helpers/fixtures.ts'
import {
  cueShow,
  isBegin,
  isLease,
  parkedCueOf,
  parkedCueRun,
  stepsOf,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterEach(async () => {
  await runner?.stop()
  runner = undefined
})

const person = { name: 'operator', teams: [], admin: false }

interface RunRowNow {
  status: string
  claimed_by: string | null
  woken: number
  due: number
}
/** The run's row now, through `db` (the pool, or a transaction that holds it). */
async function runNow(runId: number, db: Queryable = t.db): Promise<RunRowNow> {
  const [row] = await db.query<RunRowNow>(
    `SELECT status, claimed_by, woken_while_claimed AS woken, wake_at <= NOW(3) AS due
       FROM event_runs WHERE id = ?`,
    [runId],
  )
  return row as RunRowNow
}

/** A runner with a minute's tick, its show's cue parked and given back, its loop asleep: from here only a GO moves the run. */
async function parkedAndQuiet(db: Db): Promise<{ runner: Runner; runId: number; cueId: number }> {
  const started = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  runner = started
  const { runId, cue } = await parkedCueRun(t.db, started)
  await waitFor(async () => (await runNow(runId)).claimed_by === null || null, { timeoutMs: 10_000 })
  await waitFor(async () => started.asleepForMs > 10_000 || null, { timeoutMs: 10_000 })
  return { runner: started, runId, cueId: cue.id }
}

async function completed(runId: number): Promise<void> {
  await waitFor(async () => (await runNow(runId)).status === 'completed' || null, { timeoutMs: 10_000 })
}

it("a GO's run is claimed in the answer and begun by its runner at once: the begin is the runner's first statement", async () => {
  const { db, sent } = recordStatements(t.db)
  const { runner: r, runId, cueId } = await parkedAndQuiet(db)
  const claimedBefore = r.lane.claimedRuns
  const fromGo = sent.length
  let nudges = 0
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => nudges++, handOff: r.lane },
    cueId,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  await completed(runId)
  const afterGo = sent.slice(fromGo).map((s) => s.sql)
  expect(afterGo.findIndex(isBegin)).toBe(0)
  expect(afterGo.filter(isLease)).toEqual([])
  expect(r.lane.adoptedRuns).toBe(1)
  expect(r.lane.claimedRuns).toBe(claimedBefore)
  // Handed over, nobody needed waking.
  expect(nudges).toBe(0)
  const [claim] = await t.db.query<{ c: string | null; x: Date | null }>(
    'SELECT claimed_by AS c, claim_expires_at AS x FROM event_runs WHERE id = ?',
    [runId],
  )
  expect(claim).toEqual({ c: null, x: null })
})

it('a run still held when its cue is answered is woken, not taken; its holder gives it back due now', async () => {
  const { runner: r, runId, cueId } = await parkedAndQuiet(t.db)
  // Another holder's live lease, as while a runner still writes the park's give-back.
  await t.db.run(
    "UPDATE event_runs SET claimed_by = 'another', claim_expires_at = NOW(3) + INTERVAL 30 SECOND WHERE id = ?",
    [runId],
  )
  let nudges = 0
  const lane = r.lane
  const answered = await resolveCueAs(
    {
      db: t.db,
      clock: systemClock,
      nudge: () => {
        nudges++
        lane.wake()
      },
      handOff: lane,
    },
    cueId,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  expect(await runNow(runId)).toMatchObject({ claimed_by: 'another', woken: 1, due: 1 })
  expect(nudges).toBe(1)
  expect(lane.adoptedRuns).toBe(0)
  // The holder lets go as it planned (a parked run: no wake); the person's wake
  // stands. Read inside the release's own transaction: once it commits the run
  // is due and the woken lane may take it before a later read.
  const released = await t.db.transaction(async (tx) => {
    const given = await runs.releaseClaims(tx, [runId], 'another', null)
    return { given, row: await runNow(runId, tx) }
  })
  expect(released.given).toBe(1)
  expect(released.row).toMatchObject({ claimed_by: null, due: 1 })
  lane.wake()
  await completed(runId)
})

it('a stopping runner makes no claim for an answer: the answer wakes its run', async () => {
  const { runner: r, runId, cueId } = await parkedAndQuiet(t.db)
  const lane = r.lane
  await r.stop()
  expect(lane.claim()).toBeNull()
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => {}, handOff: lane },
    cueId,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  expect(await runNow(runId)).toMatchObject({ status: 'running', claimed_by: null, due: 1 })
})

it('a hand-over that arrives after its runner stopped is given back, due now', async () => {
  const { runner: r, runId, cueId } = await parkedAndQuiet(t.db)
  const lane = r.lane
  const claim = lane.claim()
  expect(claim).not.toBeNull()
  const found = await runs.getStepWithRun(t.db, cueId)
  if (!found || !claim) throw new Error('no step or no claim')
  expect(await claimAnswered(t.db, runId, found.run.status, claim)).toBe(true)
  await r.stop()
  lane.adopt(found.run, found.next, claim)
  await waitFor(async () => (await runNow(runId)).claimed_by === null || null, { timeoutMs: 10_000 })
  expect(await runNow(runId)).toMatchObject({ status: 'running', due: 1 })
  expect(lane.adoptedRuns).toBe(0)
})

it("a GO handed over while the lane's claim is under way rides in that claim's batch", async () => {
  // The runner's pool, recorded, its lane's lease held back while `gate` is set.
  let gate: Promise<void> | null = null
  let held = false
  const isLaneLease = (sql: string) =>
    /^UPDATE event_runs SET claimed_by = \?.* WHERE wake_at <= \?/s.test(sql)
  const recorded = recordStatements(t.db)
  const db = wrapStatements(recorded.db, 'run', (real) => async (sql, params) => {
    if (gate && isLaneLease(sql.replace(/\s+/g, ' '))) {
      held = true
      await gate
    }
    return real(sql, params)
  })
  const show = await cueShow(t.db)
  const [a, b] = [
    await makeRun(t.db, { definition: show, scope: 'a', scheduledFor: new Date() }),
    await makeRun(t.db, { definition: show, scope: 'b', scheduledFor: new Date() }),
  ]
  // Only these two runs in flight: the earlier tests leave theirs (one woken at a cue nobody answered).
  await t.db.run(
    "UPDATE event_runs SET status = 'cancelled', wake_at = NULL WHERE id NOT IN (?, ?) AND status = 'running'",
    [a.id, b.id],
  )
  const started = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  runner = started
  started.start()
  const [cueA, cueB] = await waitFor(
    async () => {
      const both = [await parkedCueOf(t.db, a.id), await parkedCueOf(t.db, b.id)]
      return both.every(Boolean) ? both : null
    },
    { timeoutMs: 10_000 },
  )
  await waitFor(
    async () =>
      ((await runNow(a.id)).claimed_by === null && (await runNow(b.id)).claimed_by === null) || null,
    {
      timeoutMs: 10_000,
    },
  )
  await waitFor(async () => started.asleepForMs > 10_000 || null, { timeoutMs: 10_000 })
  const lane = started.lane
  let open = () => {}
  gate = new Promise<void>((resolve) => {
    open = resolve
  })
  // A's GO wakes its run (no hand-over): the lane's claim of it waits at the gate.
  await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => lane.wake() },
    cueA?.id as number,
    person,
    'go',
    'api',
  )
  await waitFor(async () => held || null, { timeoutMs: 5_000 })
  // B's GO is handed over meanwhile, and waits for the claim rather than taking a batch of its own.
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => {}, handOff: lane },
    cueB?.id as number,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  const fromGate = recorded.sent.length
  try {
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect((await runNow(b.id)).status).toBe('running')
  } finally {
    // Whatever the assertion said, the lane's claim goes on, so the runner can stop.
    gate = null
    open()
  }
  await completed(a.id)
  await completed(b.id)
  expect(lane.riddenRuns).toBe(1)
  expect(lane.adoptedRuns).toBe(1)
  // One batch: the two runs' next steps begun by one statement.
  const begins = recorded.sent.slice(fromGate).filter((st) => isBegin(st.sql))
  expect(begins).toHaveLength(1)
  const [nextA, nextB] = [(await stepsOf(t.db, a.id))[1], (await stepsOf(t.db, b.id))[1]]
  expect(begins[0]?.params).toEqual(expect.arrayContaining([nextA?.id, nextB?.id]))
})
