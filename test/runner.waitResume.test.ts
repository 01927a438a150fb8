/**
 * A due `core.wait` resumes with no lease of its own (executor/decide.ts
 * `resumesWithoutLease`): its attempt ends at once and the run's claim keeps
 * other runners off it, so between its timer's end and its end the runner
 * sends no resume. A cue whose timeout comes still resumes under a lease:
 * its person may answer while its runner climbs or fails it.
 */
import { afterEach, expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { recordStatements, useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { logLines, stepsOf, waitForStatus } from './helpers/runnerHarness.ts'

const t = useTestDb()
const runners: Runner[] = []
afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.stop()))
})

/** The resume of timed-out steps (sql/eventSteps/moves.ts `resumeMany`), as recorded. */
const isResume = (sql: string) => /^UPDATE event_run_steps SET claimed_by = \?, claim_expires_at = /.test(sql)

const showOf = (steps: unknown[]) => makeDefinition(t.db, { program: { phases: [{ name: 'main', steps }] } })

const runWith = async (steps: unknown[]) => {
  const { db, sent } = recordStatements(t.db)
  const runner = new Runner({ db, registry: createDefaultRegistry(), clock: systemClock, tickMs: 1000 })
  runners.push(runner)
  const runId = (await makeRun(t.db, { definition: await showOf(steps), scheduledFor: new Date() })).id
  runner.start()
  runner.nudge()
  await waitForStatus(t.db, runId, ['completed', 'failed'], 15_000)
  return { runId, sent: sent.map((s) => s.sql), stepsNow: await stepsOf(t.db, runId) }
}

it('a due wait ends with no resume statement, at or after its time, and its run goes on once', async () => {
  const { runId, sent, stepsNow } = await runWith([
    { kind: 'core.wait', params: { seconds: 0.8 } },
    { kind: 'core.log', params: { message: 'after the wait' } },
  ])
  expect(sent.filter(isResume)).toEqual([])
  const [wait, after] = stepsNow
  expect(wait?.status).toBe('completed')
  expect(wait?.attempts).toBe(1)
  const end = (wait?.startedAt?.getTime() ?? Number.NaN) + 800
  expect(wait?.endedAt?.getTime()).toBeGreaterThanOrEqual(end)
  expect(after?.status).toBe('completed')
  expect((await logLines(t.db, runId)).filter((l) => l.includes('after the wait'))).toHaveLength(1)
  expect(
    (await t.db.query<{ status: string }>('SELECT status FROM event_runs WHERE id = ?', [runId]))[0]?.status,
  ).toBe('completed')
}, 30_000)

it("a cue's timeout still resumes under a lease", async () => {
  const { sent, stepsNow } = await runWith([
    { kind: 'core.cue', params: { prompt: 'Nobody answers', timeoutSeconds: 1, onTimeout: 'continue' } },
    { kind: 'core.log', params: { message: 'after the cue' } },
  ])
  expect(sent.filter(isResume).length).toBeGreaterThanOrEqual(1)
  expect(stepsNow[1]?.status).toBe('completed')
}, 30_000)
