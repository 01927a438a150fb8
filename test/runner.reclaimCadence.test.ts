/**
 * The lease sweeps (run leases, step leases whose owner did not come back)
 * run at most twice a tick in the running loop, however many passes nudges
 * ask for: under load the loop passes several times a second, and the step
 * sweep read every live run's steps each time to find none. A lease left by
 * a vanished owner is still tidied within a tick, and a pass asked for by
 * hand (`tick()`) still sweeps. Statements are recorded on the runner's own
 * pool, against the real database.
 */
import { afterEach, expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { recordStatements, useTestDb } from './helpers/db.ts'
import { parkedCueRun, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterEach(async () => {
  await runner?.stop()
  runner = undefined
})

const TICK_MS = 400
const isRunSweep = (sql: string) =>
  /^UPDATE event_runs SET .* claim_expires_at IS NOT NULL AND claim_expires_at < NOW\(3\)$/.test(sql)
const isStepSweep = (sql: string) =>
  /^SELECT s\.id FROM event_runs r STRAIGHT_JOIN event_run_steps s/.test(sql)

interface Claim {
  c: string | null
}
async function runClaim(runId: number): Promise<string | null> {
  const [row] = await t.db.query<Claim>('SELECT claimed_by AS c FROM event_runs WHERE id = ?', [runId])
  return row?.c ?? null
}
async function stepClaim(stepId: number): Promise<string | null> {
  const [row] = await t.db.query<Claim>('SELECT claimed_by AS c FROM event_run_steps WHERE id = ?', [stepId])
  return row?.c ?? null
}

/** A parked cue's run and step, both leased by an owner whose lease ran out a second ago. */
async function leftByVanishedOwner(runId: number, stepId: number): Promise<void> {
  await t.db.run(
    "UPDATE event_runs SET claimed_by = 'vanished', claim_expires_at = NOW(3) - INTERVAL 1 SECOND WHERE id = ?",
    [runId],
  )
  await t.db.run(
    "UPDATE event_run_steps SET claimed_by = 'vanished', claim_expires_at = NOW(3) - INTERVAL 1 SECOND WHERE id = ?",
    [stepId],
  )
}

it('a burst of nudged passes sweeps leases at most twice a tick; a vanished owner’s leases are still tidied', async () => {
  const { db, sent } = recordStatements(t.db)
  let passes = 0
  runner = new Runner({
    db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: TICK_MS,
    observer: { tickDuration: () => passes++ },
  })
  const { runId, cue } = await parkedCueRun(t.db, runner)
  await waitFor(async () => (await runClaim(runId)) === null || null, { timeoutMs: 10_000 })
  await leftByVanishedOwner(runId, cue.id)

  const from = sent.length
  const passesBefore = passes
  const startedAt = performance.now()
  // Nudge for three ticks: every nudge asks for a pass.
  while (performance.now() - startedAt < 3 * TICK_MS) {
    runner.nudge()
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  const elapsed = performance.now() - startedAt
  const during = sent.slice(from).map((s) => s.sql)
  const burstPasses = passes - passesBefore
  const runSweeps = during.filter(isRunSweep).length
  const stepSweeps = during.filter(isStepSweep).length

  // At most twice a tick (half a tick apart at the least), and the first pass sweeps.
  const atMost = 2 * Math.ceil(elapsed / TICK_MS) + 1
  // The burst made many more passes than that…
  expect(burstPasses).toBeGreaterThan(3 * atMost)
  // …and the sweeps kept to it (on every pass, they ran once a pass).
  expect(runSweeps).toBeGreaterThan(0)
  expect(runSweeps).toBeLessThanOrEqual(atMost)
  expect(stepSweeps).toBe(runSweeps)
  // The leases the vanished owner left are gone.
  await waitFor(
    async () => ((await runClaim(runId)) === null && (await stepClaim(cue.id)) === null) || null,
    {
      timeoutMs: 3 * TICK_MS,
    },
  )
})

it('a pass asked for by hand sweeps every time', async () => {
  const { db, sent } = recordStatements(t.db)
  runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  const { runId, cue } = await parkedCueRun(t.db, runner)
  await waitFor(async () => (await runClaim(runId)) === null || null, { timeoutMs: 10_000 })
  await runner.stop()
  const byHand = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  runner = byHand
  for (let i = 0; i < 2; i++) {
    await leftByVanishedOwner(runId, cue.id)
    const from = sent.length
    await byHand.tick()
    expect(sent.slice(from).filter((s) => isRunSweep(s.sql))).toHaveLength(1)
    expect(await runClaim(runId)).toBeNull()
    expect(await stepClaim(cue.id)).toBeNull()
  }
})
