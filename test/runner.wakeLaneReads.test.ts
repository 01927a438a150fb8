/**
 * Between a GO and its run's next step, the wake lane sends its lease, reads
 * the leased runs with their next steps in one statement (it was two), renews
 * the lease and begins the step. The renewal is one statement when every run
 * is still held (it was an UPDATE and a SELECT). The statements are recorded on the runner's own
 * pool, against the real database; only the lane is woken (not a pass), so
 * what is recorded is its.
 */
import { afterAll, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { parkedCueRun, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

/** Every statement the runner's pool sends outside a transaction, in order. */
function recording(db: Db): { db: Db; sent: string[] } {
  const sent: string[] = []
  let wrapped = db
  for (const method of ['execute', 'run', 'query', 'runQuery'] as const)
    wrapped = wrapStatements(wrapped, method, (real) => (sql, params) => {
      sent.push(sql.replace(/\s+/g, ' '))
      return real(sql, params)
    })
  return { db: wrapped, sent }
}

const isLease = (sql: string) => /^UPDATE event_runs SET claimed_by = \?, claim_token = \?/.test(sql)
const isNextStepsByIds = (sql: string) => /WHERE run_id IN \(.*GROUP BY run_id/.test(sql)
const isLeasedReadWithSteps = (sql: string) =>
  /^SELECT r\.id AS r__id, .* LEFT JOIN event_run_steps s .* WHERE r\.wake_at = \? AND r\.claim_token = \?/.test(
    sql,
  )
const isRenewal = (sql: string) => /^UPDATE event_runs SET claim_expires_at = /.test(sql)
const isBegin = (sql: string) =>
  /^UPDATE event_run_steps SET status = 'running', attempts = attempts \+ 1/.test(sql)

it("a GO's woken run is leased, read with its next step, its lease renewed in one statement, and begun", async () => {
  const { db, sent } = recording(t.db)
  // A long tick: after the first pass parks the cue, no pass runs while the lane works.
  runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 60_000 })
  const { runId, cue } = await parkedCueRun(t.db, runner)
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

  const afterGo = sent.slice(fromGo)
  const lease = afterGo.findIndex(isLease)
  const begin = afterGo.findIndex(isBegin)
  expect(lease).toBeGreaterThanOrEqual(0)
  expect(begin).toBeGreaterThan(lease)
  const between = afterGo.slice(lease + 1, begin)
  // The leased runs' read with their next steps, the renewal's UPDATE; no SELECT after it.
  const named = between.map((sql) =>
    isLeasedReadWithSteps(sql)
      ? 'runs and steps'
      : isNextStepsByIds(sql)
        ? 'steps'
        : isRenewal(sql)
          ? 'renew'
          : sql,
  )
  expect(named).toEqual(['runs and steps', 'renew'])
})
