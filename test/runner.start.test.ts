/**
 * Starting key-less runs a batch per transaction (src/runner/start.ts): what one
 * transaction writes and that it is all or nothing, for runs made only of pure
 * steps. What a start hands on to the engine, and people racing it, are in
 * runner.startHandOn.test.ts; the races between instances in sql.races.test.ts
 * and runner.multiInstance.test.ts.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import * as versionsSql from '../sql/eventVersions.ts'
import { startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { startKeylessBatch } from '../src/runner/start.ts'
import type { EngineDeps } from '../src/runner/types.ts'
import { useTestDb } from './helpers/db.ts'
import { resetRuns } from './helpers/fixtures.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  program,
  runOf,
  stepsOf,
} from './helpers/runnerHarness.ts'
import { engineDeps, pureKind, startSetup } from './helpers/startKinds.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

describe('a run made only of pure steps', () => {
  it('is started and finished by one transaction per batch: steps, log lines and status together', async () => {
    const { clock, env } = startSetup(t.db)
    const def = await defineEvent(env, {
      program: program(
        ['announce', [{ kind: 'core.log', params: { message: 'hello {{run.scope}}' } }]],
        ['wrap-up', [{ kind: 'core.log', params: { message: 'bye', level: 'warn' } }], true],
      ),
    })
    const ids: number[] = []
    for (let i = 0; i < 30; i++)
      ids.push((await startRun(controlDeps(env), { definitionId: def.id, scope: `s${i}`, actor: 'op#1' })).id)
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'one-tx' })
    const before = t.db.stats.statements
    await runner.tick()
    // A tick's sweeps plus one start transaction: nothing per run.
    expect(t.db.stats.statements - before).toBeLessThan(30)
    for (const id of ids) {
      const run = await runOf(t.db, id)
      expect(run).toMatchObject({
        status: 'completed',
        currentPhase: 'wrap-up',
        claimedBy: null,
        claimToken: null,
        wakeAt: null,
      })
      expect(run.startedAt).not.toBeNull()
      expect(run.endedAt).not.toBeNull()
      const steps = await stepsOf(t.db, id)
      expect(steps.map((s) => [s.status, s.attempts, s.claimedBy])).toEqual([
        ['completed', 1, null],
        ['completed', 1, null],
      ])
      for (const s of steps) expect(s.endedAt).not.toBeNull()
    }
    const [first] = ids
    expect((await logLines(t.db, first as number)).slice(1)).toEqual(['hello s0', 'bye'])
    const lines = await t.db.query<{ actor: string | null; level: string; step_id: number | null }>(
      'SELECT actor, level, step_id FROM event_run_logs WHERE run_id = ? AND step_id IS NOT NULL ORDER BY id',
      [first as number],
    )
    expect(lines.map((l) => [l.actor, l.level])).toEqual([
      ['one-tx', 'info'],
      ['one-tx', 'warn'],
    ])
  })

  it('past its grace window it is not started: it stays scheduled, without steps, for the missed sweep', async () => {
    const { clock, env } = startSetup(t.db)
    const def = await defineEvent(env, {
      graceSeconds: 60,
      program: program(['main', [{ kind: 'core.log', params: { message: 'late' } }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    clock.advance(61_000)
    const outcome = await startKeylessBatch(engineDeps(env), 'tok-late', 100)
    expect(outcome).toMatchObject({ locked: 1, started: 0, completed: 0, handOff: [] })
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'scheduled', startedAt: null })
    expect(await stepsOf(t.db, run.id)).toEqual([])
    expect((await runsSql.findMissed(t.db, clock.now())).map((r) => r.id)).toEqual([run.id])
  })

  it('is all or nothing, and a run the database refuses fails alone while the rest of its batch starts', async () => {
    const { clock, env } = startSetup(t.db)
    const good = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'fine' } }]]),
    })
    const poisoned = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'core.log', params: { message: 'written?' } },
          { kind: 'test.bad-line', params: {} },
        ],
      ]),
    })
    const before = await startRun(controlDeps(env), { definitionId: good.id, scope: 'a', actor: 'op#1' })
    clock.advance(1)
    const bad = await startRun(controlDeps(env), { definitionId: poisoned.id, actor: 'op#1' })
    clock.advance(1)
    const after = await startRun(controlDeps(env), { definitionId: good.id, scope: 'b', actor: 'op#1' })
    const outcome = await startKeylessBatch(engineDeps(env), 'tok-refused', 100)
    expect(outcome).toMatchObject({ locked: 3, started: 2, completed: 2 })
    expect(outcome.failed).toEqual([{ runId: bad.id, reason: expect.stringMatching(/ER_DATA_TOO_LONG/) }])
    for (const r of [before, after]) expect((await runOf(t.db, r.id)).status).toBe('completed')
    // Nothing of the refused start was kept: no step rows, no line from its first step.
    const failed = await runOf(t.db, bad.id)
    expect(failed).toMatchObject({ status: 'failed', claimedBy: null })
    expect(failed.lastError).toMatch(/^could not be started: The database refused a write \(ER_DATA_TOO_LONG/)
    expect(failed.lastError).not.toMatch(/INSERT|event_run_logs/)
    expect(await stepsOf(t.db, bad.id)).toEqual([])
    const lines = await logLines(t.db, bad.id)
    expect(lines).toHaveLength(2)
    expect(lines[1]).toMatch(/^could not be started/)
  })

  it('the one-run fallback stops at a run past its grace at the head instead of locking it again and again', async () => {
    const { clock, env } = startSetup(t.db)
    const late = await defineEvent(env, {
      graceSeconds: 1,
      program: program(['main', [{ kind: 'core.log', params: { message: 'late' } }]]),
    })
    const poisoned = await defineEvent(env, {
      program: program(['main', [{ kind: 'test.bad-line', params: {} }]]),
    })
    const head = await startRun(controlDeps(env), { definitionId: late.id, actor: 'op#1' })
    clock.advance(1)
    const bad = await startRun(controlDeps(env), { definitionId: poisoned.id, actor: 'op#1' })
    clock.advance(5000)
    const before = t.db.stats.statements
    const outcome = await startKeylessBatch(engineDeps(env), 'tok-head', 100)
    expect(t.db.stats.statements - before).toBeLessThan(30)
    expect(outcome).toMatchObject({ started: 0, failed: [] })
    // The missed sweep takes the head at the next tick; then the poisoned run fails alone.
    await runsSql.transitionMany(t.db, [head.id], 'scheduled', 'missed')
    const next = await startKeylessBatch(engineDeps(env), 'tok-head-2', 100)
    expect(next.failed.map((f) => f.runId)).toEqual([bad.id])
  })

  it('a run whose stored program cannot be expanded fails alone, saying so', async () => {
    const { env } = startSetup(t.db)
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'fine' } }]]),
    })
    const fine = await startRun(controlDeps(env), { definitionId: def.id, scope: 'fine', actor: 'op#1' })
    // A version row written around the validation, as a bad migration or a hand edit might.
    const corrupt = await versionsSql.publish(t.db, def.id, { phases: 'not a list' }, 'test')
    const broken = await runsSql.materialise(t.db, {
      definitionId: def.id,
      versionId: corrupt.id,
      scope: 'broken',
      scheduledFor: new Date(Date.now() - 1000),
      timezone: 'UTC',
      concurrencyKey: null,
    })
    const outcome = await startKeylessBatch(engineDeps(env), 'tok-corrupt', 100)
    expect(outcome).toMatchObject({ locked: 2, started: 1, completed: 1 })
    expect((await runOf(t.db, fine.id)).status).toBe('completed')
    const failed = await runOf(t.db, broken as number)
    expect(failed.status).toBe('failed')
    expect(failed.lastError).toMatch(/could not be started: its program cannot be expanded/)
  })

  it('a fault of the runner itself fails no run: the start throws and the runs stay scheduled', async () => {
    const { env } = startSetup(t.db)
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'x' } }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const buggy = {
      ...engineDeps(env),
      registry: {
        get: () => {
          throw new TypeError('a bug in the runner')
        },
      } as unknown as EngineDeps['registry'],
    }
    await expect(startKeylessBatch(buggy, 'tok-bug', 100)).rejects.toThrow(/a bug in the runner/)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'scheduled', lastError: null })
    expect(await stepsOf(t.db, run.id)).toEqual([])
  })

  it('a pure step that never finishes fails its own run at its timeout; the rest of the batch starts', async () => {
    const { clock, env } = startSetup(t.db)
    const good = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'fine' } }]]),
    })
    const hangs = await defineEvent(env, {
      program: program(['main', [{ kind: 'test.hang-pure', params: {}, timeoutSeconds: 1 }]]),
    })
    const stuck = await startRun(controlDeps(env), { definitionId: hangs.id, actor: 'op#1' })
    clock.advance(1)
    const fine = await startRun(controlDeps(env), { definitionId: good.id, actor: 'op#1' })
    const outcome = await startKeylessBatch(engineDeps(env), 'tok-hang', 100)
    expect(outcome).toMatchObject({ locked: 2, started: 1, completed: 1 })
    expect((await runOf(t.db, fine.id)).status).toBe('completed')
    const failed = await runOf(t.db, stuck.id)
    expect(failed.status).toBe('failed')
    expect(failed.lastError).toMatch(/could not be started: timed out after 1000 ms/)
  })

  it('a start cut short by the runner’s stop grace fails nothing: the runs stay scheduled', async () => {
    const { env } = startSetup(t.db)
    const hangs = await defineEvent(env, {
      program: program(['main', [{ kind: 'test.hang-pure', params: {} }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: hangs.id, actor: 'op#1' })
    const stop = new AbortController()
    setTimeout(() => stop.abort(), 200)
    await expect(
      startKeylessBatch({ ...engineDeps(env), hardStop: stop.signal }, 'tok-stop', 100),
    ).rejects.toThrow(/shutting down/)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'scheduled', lastError: null })
    expect(await stepsOf(t.db, run.id)).toEqual([])
  })
})

describe('pure step kinds', () => {
  it('must be inline and free of side effects', () => {
    const withEffects = { ...pureKind('test.impure', async () => ({ type: 'completed' })), sideEffects: true }
    expect(() => makeRegistry([withEffects])).toThrow(/cannot be pure/)
    const notInline = { ...pureKind('test.slow', async () => ({ type: 'completed' })), inline: false }
    expect(() => makeRegistry([notInline])).toThrow(/cannot be pure/)
  })
})
