/**
 * Between a GO and its run's next step, the wake lane sends its lease, reads
 * the leased runs with their next steps in one statement (it was two) and
 * begins the step. The lease is taken for as long as a step with the default
 * timeout needs, with a third of a lease to spare, so the round does not renew
 * it first (it renewed every round); a step with a longer timeout still has
 * its run's lease renewed to cover it before it begins. The statements are
 * recorded on the runner's own pool, against the real database; only the
 * lane is woken (not a pass), so what is recorded is its.
 */
import { afterEach, expect, it } from 'vitest'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { DEFAULT_STEP_NEED_MS, stepNeedMs } from '../src/runner/roundLease.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { recordStatements, type SentStatement, useTestDb } from './helpers/db.ts'
import { isBegin, isLease, parkedCueRun, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterEach(async () => {
  await runner?.stop()
  runner = undefined
})

const isNextStepsByIds = (sql: string) => /WHERE run_id IN \(.*GROUP BY run_id/.test(sql)
const isLeasedReadWithSteps = (sql: string) =>
  /^SELECT r\.id AS r__id, .* LEFT JOIN event_run_steps s .* WHERE r\.wake_at = \? AND r\.claim_token = \?/.test(
    sql,
  )
const isRenewal = (sql: string) => /^UPDATE event_runs SET claim_expires_at = /.test(sql)
const isKeepAlive = (sql: string) => /^UPDATE event_runs SET claim_expires_at = GREATEST/.test(sql)

/** The lease's length a lease, renewal or begin statement binds (its `NOW(3) + INTERVAL ? MICROSECOND`), in ms. */
function leaseMsOf(s: SentStatement): number {
  const at = s.sql.slice(0, s.sql.indexOf('INTERVAL ? MICROSECOND')).split('?').length - 1
  return Number(s.params[at]) / 1000
}

/**
 * A show of a cue then `after`, its cue parked by a first pass; then the GO,
 * with only the lane awake. Answers the statements sent from the GO until
 * the run completed.
 */
async function afterGo(after?: Record<string, unknown>[]): Promise<SentStatement[]> {
  const { db, sent } = recordStatements(t.db)
  // A long tick: after the first pass parks the cue, no pass runs while the lane works.
  runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  const { runId, cue } = await parkedCueRun(t.db, runner, after)
  // The first pass's flight gives its claim back after the park; then the GO.
  await waitFor(
    async () => {
      const [row] = await t.db.query<{ c: string | null }>(
        'SELECT claimed_by AS c FROM event_runs WHERE id = ?',
        [runId],
      )
      return row?.c === null || null
    },
    { timeoutMs: 10_000 },
  )
  // And the loop asleep for its long tick: from here only the lane sends anything.
  const loop = runner
  await waitFor(async () => loop.asleepForMs > 10_000 || null, { timeoutMs: 10_000 })
  const before = runner.lane.claimedRuns
  const fromGo = sent.length
  const person = { name: 'operator', teams: [], admin: false }
  const lane = runner.lane
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => lane.wake() },
    cue.id,
    person,
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
  await waitFor(
    async () => {
      const [row] = await t.db.query<{ s: string }>('SELECT status AS s FROM event_runs WHERE id = ?', [
        runId,
      ])
      return row?.s === 'completed' || null
    },
    { timeoutMs: 10_000 },
  )
  expect(runner.lane.claimedRuns - before).toBe(1)
  return sent.slice(fromGo)
}

it("a GO's woken run is leased for its step, read with its next step and begun: no renewal between", async () => {
  const sent = await afterGo()
  const lease = sent.findIndex((s) => isLease(s.sql))
  const begin = sent.findIndex((s) => isBegin(s.sql))
  expect(lease).toBeGreaterThanOrEqual(0)
  expect(begin).toBeGreaterThan(lease)
  const named = sent
    .slice(lease + 1, begin)
    .map(({ sql }) =>
      isLeasedReadWithSteps(sql)
        ? 'runs and steps'
        : isNextStepsByIds(sql)
          ? 'steps'
          : isRenewal(sql)
            ? 'renew'
            : sql,
    )
  expect(named).toEqual(['runs and steps'])
  // The lease itself covers the step: its default timeout and the grace, and room to spare.
  expect(leaseMsOf(sent[lease] as SentStatement)).toBeGreaterThan(DEFAULT_STEP_NEED_MS)
  // The step's own lease is its timeout and the grace, as before.
  expect(leaseMsOf(sent[begin] as SentStatement)).toBeGreaterThanOrEqual(DEFAULT_STEP_NEED_MS)
})

it('the rounds after the first take the lease as it is: three steps after a GO, no renewal', async () => {
  const sent = await afterGo([
    { kind: 'core.log', params: { message: 'one' } },
    { kind: 'core.log', params: { message: 'two' } },
    { kind: 'core.log', params: { message: 'three' } },
  ])
  expect(sent.filter((s) => isBegin(s.sql))).toHaveLength(3)
  // A keep-alive (every third of LEASE_MS) is not a round's renewal; none is due in so short a batch anyway.
  expect(sent.filter((s) => isRenewal(s.sql) && !isKeepAlive(s.sql))).toEqual([])
})

it('a step with a longer timeout than the default has its run lease renewed to cover it before it begins', async () => {
  const sent = await afterGo([
    { kind: 'core.log', params: { message: 'slow to time out' }, timeoutSeconds: 120 },
  ])
  const begin = sent.findIndex((s) => isBegin(s.sql))
  const renewals = sent
    .map((s, i) => [s, i] as const)
    .filter(([s]) => isRenewal(s.sql) && !isKeepAlive(s.sql))
  expect(renewals).toHaveLength(1)
  const [renewal, at] = renewals[0] as readonly [SentStatement, number]
  expect(at).toBeLessThan(begin)
  expect(leaseMsOf(renewal)).toBeGreaterThanOrEqual(stepNeedMs(120_000))
  expect(leaseMsOf(sent[begin] as SentStatement)).toBeGreaterThanOrEqual(stepNeedMs(120_000))
})
