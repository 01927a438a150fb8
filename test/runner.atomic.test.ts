/**
 * A run's end and its steps' move together or not at all. A fault injected
 * between the statements of cancelRun, of the engine's failing of a run and of
 * createDefinition (the database refuses the second statement, as it would
 * after a crash or a lost connection) must leave nothing half-done: no parked
 * cue or pending step under a finished run, no definition without a version.
 */
import { describe, expect, it } from 'vitest'
import { DatabaseError, type Db, type Queryable } from '../sql/db.ts'
import { cancelRun, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { StepFailure } from '../src/runner/steps/types.ts'
import { useTestDb, wrapTransactionStatements } from './helpers/db.ts'
import { unique } from './helpers/fixtures.ts'
import {
  controlDeps,
  customKind,
  defineEvent,
  makeRegistry,
  program,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

/** The real pool, except that inside a transaction the first write matching `pattern` fails after the ones before it ran. */
function failingInTransaction(db: Db, pattern: RegExp): { db: Db; faults: () => number } {
  let faults = 0
  const proxy = wrapTransactionStatements(db, 'run', (real) => async (sql, args) => {
    if (faults === 0 && pattern.test(sql)) {
      faults++
      throw new DatabaseError(
        'The database refused a write (injected fault).',
        // A refusal, not unavailability (1180 at COMMIT is a Galera partition, waited out and retried).
        Object.assign(new Error('injected'), { errno: 1406, code: 'ER_DATA_TOO_LONG' }),
      )
    }
    return real(sql, args)
  })
  return { db: proxy, faults: () => faults }
}

/** A finished run has no step left pending or running (parked cues included). */
async function expectNoLiveStepUnderFinishedRun(db: Queryable, runId: number): Promise<void> {
  const run = await runOf(db, runId)
  const live = (await stepsOf(db, runId)).filter((s) => s.status === 'pending' || s.status === 'running')
  if (['completed', 'cancelled', 'failed', 'missed'].includes(run.status)) expect(live).toEqual([])
}

const CANCEL_STEPS = /UPDATE event_run_steps\s+SET status = 'cancelled'/

describe('cancelRun', () => {
  it('a fault between the run and its steps leaves both as they were; a retry moves both', async () => {
    const registry = makeRegistry()
    const clock = new TestClock()
    const env = { db: t.db, registry, clock }
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.cue', params: { prompt: 'Open the gates' } }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await new Runner({ db: t.db, registry, clock, instanceId: 'a' }).tick()
    expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.parked])).toEqual([['running', true]])

    const faulty = failingInTransaction(t.db, CANCEL_STEPS)
    await expect(cancelRun({ db: faulty.db, clock }, run.id, 'op#1')).rejects.toThrow(/injected fault/)
    expect(faulty.faults()).toBe(1)
    await expectNoLiveStepUnderFinishedRun(t.db, run.id)
    expect((await runOf(t.db, run.id)).status).toBe('running')
    expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.parked])).toEqual([['running', true]])

    const answer = await cancelRun(controlDeps(env), run.id, 'op#1')
    expect(answer.applied).toBe(true)
    expect(answer.run.status).toBe('cancelled')
    expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.parked])).toEqual([['cancelled', false]])
  })
})

describe("the engine's failing of a run", () => {
  it('a fault between the failed step, the run and its other steps leaves none of them moved', async () => {
    let calls = 0
    const registry = makeRegistry([
      customKind('test.boom', () => {
        calls++
        throw new StepFailure('boom', { retryable: false })
      }),
    ])
    const clock = new TestClock()
    const env = { db: t.db, registry, clock }
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'test.boom', params: {}, retry: { attempts: 1 } },
          { kind: 'core.cue', params: { prompt: 'never reached' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })

    const faulty = failingInTransaction(t.db, CANCEL_STEPS)
    await new Runner({ db: faulty.db, registry, clock, instanceId: 'a' }).tick()
    expect(calls).toBe(1)
    expect(faulty.faults()).toBe(1)
    await expectNoLiveStepUnderFinishedRun(t.db, run.id)
    expect((await runOf(t.db, run.id)).status).toBe('running')
    // Not recorded as failed either: a later tick must not go on past it.
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual(['running', 'pending'])

    // Once the step's lease has run out (on the database's clock), the next tick runs it
    // again and fails the run whole.
    await t.db.run(
      'UPDATE event_run_steps SET claim_expires_at = NOW(3) - INTERVAL 1 SECOND WHERE run_id = ? AND claimed_by IS NOT NULL',
      [run.id],
    )
    clock.advance(10 * 60_000)
    await new Runner({ db: t.db, registry, clock, instanceId: 'b' }).tick()
    expect(calls).toBe(2)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'failed' })
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual(['failed', 'cancelled'])
  })
})

describe('createDefinition', () => {
  it('a fault on the version insert leaves no definition behind', async () => {
    const registry = makeRegistry()
    const clock = new TestClock()
    const faulty = failingInTransaction(t.db, /INSERT INTO event_versions/)
    const slug = unique('atomic')
    await expect(
      defineEvent(
        { db: faulty.db, registry, clock },
        { slug, program: program(['main', [{ kind: 'core.log', params: { message: 'hi' } }]]) },
      ),
    ).rejects.toThrow(/injected fault/)
    expect(faulty.faults()).toBe(1)
    const rows = await t.db.query('SELECT id FROM event_definitions WHERE slug = ?', [slug])
    expect(rows).toEqual([])
    // The slug is free: the same definition can be created.
    const def = await defineEvent(
      { db: t.db, registry, clock },
      { slug, program: program(['main', [{ kind: 'core.log', params: { message: 'hi' } }]]) },
    )
    expect(def.currentVersionId).not.toBeNull()
  })
})
