/**
 * What a GO costs the database. Under a show's load every statement is a
 * round trip and every pool acquisition a wait in a busy queue, so both are
 * budgets: the whole answer runs on one connection taken once (its
 * transaction, then the reply's read and the audit entry after the commit),
 * and the run is read by the step's id without the list's waiting count. The
 * shape before was 14 statements on seven acquisitions (the ladder and the
 * run read ahead of the transaction, the reply and the audit after it).
 */
import { afterAll, expect, it } from 'vitest'
import { createDb } from '../sql/db.ts'
import { answerCue } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { DbCueLadder } from '../src/runner/cueLadder.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { stepsOf, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

/**
 * The most statements an applied GO may send (a budget: 12 when written, 11
 * once the step and its run were one read, 12 again since its event is two
 * statements in the batch with the COMMIT, where its row id is not known).
 */
const APPLIED_BUDGET = 12
/**
 * The round trips that carry them (11, then 7 once the answer's last writes
 * went with its COMMIT): the BEGIN rides with the step's read and the
 * ladder's lock, and the reply's read with the audit entry.
 */
const APPLIED_ROUND_TRIPS = 4

const oneStep = (steps: unknown[]) => ({ program: { phases: [{ name: 'main', steps }] } })

it('an applied GO sends at most 12 statements in 4 round trips, a refused second answer no more, and an outsider on an exclusive cue is FORBIDDEN', async () => {
  // As the server builds it: cues open ladders (who may answer, and the answer's record).
  runner = new Runner({
    db: t.db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 200,
    settings: { webhookAllow: [], cueLadder: new DbCueLadder(t.db) },
  })
  const open = await makeDefinition(
    t.db,
    oneStep([
      { kind: 'core.cue', params: { prompt: 'GO?', assignee: 'stage-manager' } },
      { kind: 'core.log', params: { message: 'after GO' } },
    ]),
  )
  const exclusive = await makeDefinition(
    t.db,
    oneStep([
      { kind: 'core.cue', params: { prompt: 'Mine only', assignee: 'stage-manager', exclusive: true } },
    ]),
  )
  const openRun = (await makeRun(t.db, { definition: open, scope: 'a', scheduledFor: new Date() })).id
  const exclusiveRun = (await makeRun(t.db, { definition: exclusive, scope: 'b', scheduledFor: new Date() }))
    .id
  runner.start()
  const parked = async (runId: number) =>
    waitFor(async () => (await stepsOf(t.db, runId)).find((st) => st.kind === 'core.cue' && st.parked), {
      timeoutMs: 10_000,
    })
  const [cue, mine] = [await parked(openRun), await parked(exclusiveRun)]
  await runner.stop()
  runner = undefined

  // Its own pool, so nothing but the answer is counted.
  const db = createDb(t.url)
  let acquisitions = 0
  db.pool.on('acquire', () => acquisitions++)
  try {
    const deps = { db, clock: systemClock }
    const person = { name: 'stage-manager', teams: [], admin: false }
    const before = { ...db.stats }
    const go = await answerCue(deps, { stepId: cue.id, person, outcome: 'resolved', via: 'api', text: 'go' })
    const applied = db.stats.statements - before.statements
    const trips = db.stats.roundTrips - before.roundTrips
    // BEGIN with the step and run read and the ladder locked; the move; the
    // answer's record, its event, log line and wake with the COMMIT; the
    // reply's read with the audit entry.
    expect(trips).toBeLessThanOrEqual(APPLIED_ROUND_TRIPS)
    // One connection for the whole answer: a full queue can refuse it only before it applies.
    expect(acquisitions).toBe(1)
    expect(go.applied).toBe(true)
    expect(go.step.status).toBe('completed')
    expect(applied).toBeLessThanOrEqual(APPLIED_BUDGET)

    const again = db.stats.statements
    const late = await answerCue(deps, {
      stepId: cue.id,
      person: { name: 'deputy', teams: [], admin: false },
      outcome: 'resolved',
      via: 'api',
      text: null,
    })
    const second = db.stats.statements - again
    expect(acquisitions).toBe(2)
    expect(late.applied).toBe(false)
    expect(second).toBeLessThanOrEqual(APPLIED_BUDGET)

    // The exclusivity check now reads the locked ladder row: an outsider is still refused, and nothing moves.
    const beforeRefusal = db.stats.roundTrips
    await expect(
      answerCue(deps, {
        stepId: mine.id,
        person: { name: 'intruder', teams: [], admin: false },
        outcome: 'resolved',
        via: 'api',
        text: null,
      }),
    ).rejects.toMatchObject({ code: 'FORBIDDEN' })
    expect((await stepsOf(t.db, exclusiveRun)).find((st) => st.id === mine.id)?.parked).toBe(true)
    const refusals = await t.db.query<{ message: string }>(
      `SELECT message FROM event_run_logs WHERE step_id = ? AND message LIKE '%refused%'`,
      [mine.id],
    )
    expect(refusals).toHaveLength(1)
    // An outsider costs 3 round trips: the BEGIN with the reads and the
    // lock, the COMMIT, then the refusal's line with its audit entry (4 when
    // those two went one by one).
    const refusalTrips = db.stats.roundTrips - beforeRefusal
    const [audited] = await t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM audit_log WHERE target_id = ? AND outcome = 'refused'`,
      [String(mine.id)],
    )
    expect(Number(audited?.n)).toBe(1)
    expect(refusalTrips).toBe(3)
    const ok = await answerCue(deps, { stepId: mine.id, person, outcome: 'resolved', via: 'api', text: null })
    expect(ok.applied).toBe(true)
    console.log(`statements: an applied GO ${applied} in ${trips} round trips, a second answer ${second}`)
  } finally {
    await db.close()
  }
})
