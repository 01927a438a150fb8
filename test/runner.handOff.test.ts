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
import type { Db } from '../sql/db.ts'
import { claimAnswered } from '../sql/eventRuns/handOff.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { recordStatements, useTestDb } from './helpers/db.ts'
import { isBegin, isLease, parkedCueRun, waitFor } from './helpers/runnerHarness.ts'

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
async function runNow(runId: number): Promise<RunRowNow> {
  const [row] = await t.db.query<RunRowNow>(
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
  // The holder lets go as it planned (a parked run: no wake); the person's wake stands.
  await runs.releaseClaims(t.db, [runId], 'another', null)
  expect(await runNow(runId)).toMatchObject({ claimed_by: null, due: 1 })
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
