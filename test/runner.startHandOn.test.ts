/**
 * What a start transaction (src/runner/start.ts) hands on: a run whose program
 * goes on after its pure steps, inline results, a backlog of batches, a
 * program that opens with its ending phase, and a person's pause or cancel
 * racing the start. What one transaction writes is in runner.start.test.ts.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { cancelRun, pauseRun, resumeRun, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { startKeylessBatch } from '../src/runner/start.ts'
import { useTestDb } from './helpers/db.ts'
import { resetRuns } from './helpers/fixtures.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  program,
  runOf,
  sleep,
  stepsOf,
} from './helpers/runnerHarness.ts'
import { calls, engineDeps, gate, startSetup } from './helpers/startKinds.ts'

const t = useTestDb()
beforeEach(() => resetRuns(t.db))

describe('a run whose program goes on after its pure steps', () => {
  it('is claimed in running for the engine, which runs the next step in the same tick', async () => {
    const { clock, env } = startSetup(t.db)
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
    calls.flaky = 0
    const { clock, env } = startSetup(t.db)
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
    expect(calls.flaky).toBe(2)
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
    calls.answer = 0
    const { clock, env } = startSetup(t.db)
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
    expect(calls.answer).toBe(2)
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
    const { clock, env } = startSetup(t.db)
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
    const { clock, env } = startSetup(t.db)
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
    const { clock, env } = startSetup(t.db)
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
    const { env } = startSetup(t.db)
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
