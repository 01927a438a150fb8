/**
 * Starting key-less runs a batch per transaction (src/runner/start.ts): what one
 * transaction writes, what it leaves for the engine, and that it is all or
 * nothing. The races between instances are in sql.races.test.ts and
 * runner.multiInstance.test.ts.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import * as versionsSql from '../sql/eventVersions.ts'
import { listRuns } from '../sql/runPage.ts'
import { cancelRun, pauseRun, resumeRun, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { startKeylessBatch } from '../src/runner/start.ts'
import type { AnyStepKind } from '../src/runner/steps/registry.ts'
import { StepFailure } from '../src/runner/steps/types.ts'
import type { EngineDeps } from '../src/runner/types.ts'
import { useTestDb } from './helpers/db.ts'
import { resetRuns } from './helpers/fixtures.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  sleep,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

let flakyCalls = 0
let answerCalls = 0
const gate = (() => {
  const g = {
    entered: () => {},
    open: () => {},
    opened: Promise.resolve(),
    reached: Promise.resolve(),
    reset() {
      g.reached = new Promise<void>((r) => {
        g.entered = r
      })
      g.opened = new Promise<void>((r) => {
        g.open = r
      })
    },
  }
  return g
})()
/** A kind that declares itself pure, whatever `execute` really does. */
const pureKind = (kind: string, execute: AnyStepKind['execute']): AnyStepKind => ({
  kind,
  sideEffects: false,
  inline: true,
  pure: true,
  validate: () => [],
  execute,
})

const kinds: AnyStepKind[] = [
  // Its first attempt fails: the start must not count it as done.
  pureKind('test.flaky-pure', async (ctx) => {
    flakyCalls++
    if (flakyCalls === 1) throw new StepFailure('first attempt fails')
    await ctx.log('info', 'flaky succeeded')
    return { type: 'completed' }
  }),
  // Never finishes.
  pureKind('test.hang-pure', () => new Promise(() => {})),
  // Holds its start transaction open until the test opens the gate.
  pureKind('test.gate-pure', async () => {
    gate.entered()
    await gate.opened
    return { type: 'completed' }
  }),
  // Answers a result instead of only logging (custom kinds may).
  pureKind('test.answer-pure', async (ctx) => {
    answerCalls++
    await ctx.log('info', 'answered')
    return { type: 'completed', result: { answer: 42, run: ctx.run.id } }
  }),
  {
    kind: 'test.answer-inline',
    sideEffects: false,
    inline: true,
    validate: () => [],
    execute: async () => {
      answerCalls++
      return { type: 'completed', result: { inline: true } }
    },
  },
  // Writes a line the database refuses (a level longer than its column).
  pureKind('test.bad-line', async (ctx) => {
    await ctx.log('x'.repeat(50) as 'info', 'refused')
    return { type: 'completed' }
  }),
]

function setup(start: Date | number = Date.now()) {
  const clock = new TestClock(start)
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(kinds), clock }
  return { clock, env }
}

function engineDeps(env: RunnerTestEnv, owner = 'starter'): EngineDeps {
  return {
    db: env.db,
    registry: env.registry,
    clock: env.clock,
    owner,
    leaseMs: 30_000,
    settings: { webhookAllow: [] },
    stopping: () => false,
    hardStop: new AbortController().signal,
  }
}

describe('a run made only of pure steps', () => {
  it('is started and finished by one transaction per batch: steps, log lines and status together', async () => {
    const { clock, env } = setup()
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
    const { clock, env } = setup()
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
    const { clock, env } = setup()
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
    const { clock, env } = setup()
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
    const { env } = setup()
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
    const { env } = setup()
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
    const { clock, env } = setup()
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
    const { env } = setup()
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

describe('a run whose program goes on after its pure steps', () => {
  it('is claimed in running for the engine, which runs the next step in the same tick', async () => {
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program(
        ['announce', [{ kind: 'core.log', params: { message: 'hello' } }]],
        ['main', [{ kind: 'core.cue', params: { prompt: 'Open the gates' } }]],
      ),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const outcome = await startKeylessBatch(engineDeps(env, 'starter'), 'tok-cue', 100)
    expect(outcome).toMatchObject({ locked: 1, started: 1, completed: 0 })
    expect(outcome.handOff.map((r) => [r.id, r.status, r.currentPhase])).toEqual([
      [run.id, 'running', 'announce'],
    ])
    // Claimed by the starter, with the phase being run: the engine moves it on.
    expect(await runOf(t.db, run.id)).toMatchObject({
      status: 'running',
      currentPhase: 'announce',
      claimedBy: 'starter',
      claimToken: 'tok-cue',
    })
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual(['completed', 'pending'])

    // Through a runner, the same start is followed by the cue parking in that tick.
    const other = await startRun(controlDeps(env), { definitionId: def.id, scope: 'b', actor: 'op#1' })
    await new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'r' }).tick()
    expect(await runOf(t.db, other.id)).toMatchObject({
      status: 'running',
      currentPhase: 'main',
      waitingSteps: 1,
      claimedBy: null,
    })
  })

  it('a pure step whose attempt fails is not recorded as done: the engine runs it again with its retries', async () => {
    flakyCalls = 0
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'core.log', params: { message: 'first' } },
          { kind: 'test.flaky-pure', params: {} },
          { kind: 'core.log', params: { message: 'last' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'flaky' }).tick()
    expect(flakyCalls).toBe(2)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed', health: 'ok' })
    expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.attempts])).toEqual([
      ['completed', 1],
      ['completed', 1],
      ['completed', 1],
    ])
    // The failed attempt's outcome was never written; the successful one's was, once.
    expect((await logLines(t.db, run.id)).slice(1)).toEqual(['first', 'flaky succeeded', 'last'])
  })
})

describe('a step of an inline kind that answers a result', () => {
  it('is executed once, and its result is stored with the step, on the start and the batch paths', async () => {
    answerCalls = 0
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          // Pure: run inside the start transaction.
          { kind: 'test.answer-pure', params: {} },
          // Inline but not pure: run by the batch path after the start commits.
          { kind: 'test.answer-inline', params: {} },
          { kind: 'core.log', params: { message: 'last' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'answers' }).tick()
    expect(answerCalls).toBe(2)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed', health: 'ok' })
    expect((await stepsOf(t.db, run.id)).map((s) => [s.status, s.attempts, s.result])).toEqual([
      ['completed', 1, { answer: 42, run: run.id }],
      ['completed', 1, { inline: true }],
      ['completed', 1, null],
    ])
    expect((await logLines(t.db, run.id)).slice(1)).toEqual(['answered', 'last'])
  })
})

describe('a backlog', () => {
  it('brings in the second start transaction as soon as the first has locked a full batch, not once it commits', async () => {
    gate.reset()
    const { clock, env } = setup()
    const gated = await defineEvent(env, {
      program: program(['main', [{ kind: 'test.gate-pure', params: {} }]]),
    })
    const plain = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'plain' } }]]),
    })
    const now = clock.now().getTime()
    // The two oldest fill the first batch (batchSize 2) and hold it open on the gate.
    for (const scope of ['g1', 'g2'])
      await startRun(controlDeps(env), {
        definitionId: gated.id,
        scope,
        at: new Date(now - 2000),
        actor: 'op#1',
      })
    const later = [
      await startRun(controlDeps(env), {
        definitionId: plain.id,
        scope: 'p1',
        at: new Date(now - 1000),
        actor: 'op#1',
      }),
      await startRun(controlDeps(env), {
        definitionId: plain.id,
        scope: 'p2',
        at: new Date(now - 1000),
        actor: 'op#1',
      }),
    ]
    const runner = new Runner({
      db: t.db,
      registry: env.registry,
      clock,
      instanceId: 'backlog',
      batchSize: 2,
      startConcurrency: 2,
    })
    const tick = runner.tick()
    await gate.reached
    try {
      // While the first batch waits on its gate, the second one starts and commits the next runs.
      const deadline = Date.now() + 5000
      while (
        (await Promise.all(later.map((r) => runOf(t.db, r.id)))).some((r) => r?.status !== 'completed')
      ) {
        if (Date.now() > deadline) throw new Error('the second batch did not run alongside the first')
        await sleep(20)
      }
    } finally {
      gate.open()
    }
    await tick
    const all = await listRuns(t.db, { limit: 10 })
    expect(all.map((r) => r.status)).toEqual(['completed', 'completed', 'completed', 'completed'])
  })
})

describe('a program that opens with its ending phase', () => {
  it.each([
    ['key-less (start transaction)', null],
    ['keyed (claimStart)', 'stage:{{run.scope}}'],
  ])('is ENDING from its start: %s', async (_, concurrencyKey) => {
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      concurrencyKey,
      program: program(['wrap-up', [{ kind: 'core.cue', params: { prompt: 'Lights off' } }], true]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'ending' }).tick()
    expect(await runOf(t.db, run.id)).toMatchObject({
      status: 'ending',
      currentPhase: 'wrap-up',
      waitingSteps: 1,
      claimedBy: null,
    })
  })
})

describe('a person racing the start transaction', () => {
  it('a pause sent while a run is being started lands before its next step', async () => {
    gate.reset()
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'test.gate-pure', params: {} },
          { kind: 'core.cue', params: { prompt: 'Open the gates' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: 'gated' })
    const tick = runner.tick()
    await gate.reached
    // The run's row is locked by the start: the pause waits for it.
    const pause = pauseRun(controlDeps(env), run.id, 'op#2')
    await sleep(150)
    gate.open()
    await tick
    expect((await pause).applied).toBe(true)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'paused', waitingSteps: 0, claimedBy: null })
    expect((await stepsOf(t.db, run.id)).map((st) => st.status)).toEqual(['completed', 'pending'])
    // Resumed, the cue parks at the next tick.
    expect((await resumeRun(controlDeps(env), run.id, 'op#2')).applied).toBe(true)
    await runner.tick()
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'running', waitingSteps: 1 })
  })

  it('a cancel waits for the start to commit, then answers applied: false on the finished run', async () => {
    const { env } = setup()
    const def = await defineEvent(env, {
      program: program(['main', [{ kind: 'core.log', params: { message: 'x' } }]]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    let cancel: Promise<{ applied: boolean }> | undefined
    await t.db.transaction(
      async (tx) => {
        const locked = await runsSql.lockDueToStart(tx, new Date(), 10)
        expect(locked.map((r) => r.id)).toEqual([run.id])
        // The cancel is sent while the row is locked; it must wait, not win.
        cancel = cancelRun(controlDeps(env), run.id, 'op#2', 'too late')
        await sleep(200)
        expect(await runsSql.markStarted(tx, [run.id], { status: 'completed', phase: 'main' })).toBe(1)
      },
      { isolation: 'READ COMMITTED' },
    )
    expect((await cancel)?.applied).toBe(false)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed' })
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
