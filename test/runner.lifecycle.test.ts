/**
 * One run through its whole life, tick by tick with a hand-moved clock: phases,
 * parked cues versus timers, leases between ticks, the ending phase; then a
 * pause or cancel from inside a batch, and the per-step timeout.
 */
import { describe, expect, it } from 'vitest'
import * as stepsSql from '../sql/eventSteps/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { cancelRun, pauseRun, resolveCue, resumeRun, startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import type { AnyStepKind } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  customKind,
  defineEvent,
  logLines,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

/** Counters the custom kinds below bump, by kind. */
const executed = new Map<string, number>()
const bump = (name: string) => executed.set(name, (executed.get(name) ?? 0) + 1)
const hangSignals: AbortSignal[] = []

function kinds(env: () => RunnerTestEnv): AnyStepKind[] {
  // Each control kind twice: a kind that takes a concurrency slot, and `inline` (one that takes none, src/runner/advance.ts).
  return [false, true]
    .flatMap((inline) => {
      const suffix = inline ? '-inline' : ''
      return [
        customKind(`test.count${suffix}`, (ctx) => bump(String(ctx.params.counter ?? 'count')), { inline }),
        // Pauses (or cancels) its own run while it executes, as a person would from the API.
        customKind(
          `test.pause-self${suffix}`,
          async (ctx) => {
            await pauseRun(controlDeps(env()), ctx.run.id, 'op#inside')
          },
          { inline },
        ),
        customKind(
          `test.cancel-self${suffix}`,
          async (ctx) => {
            await cancelRun(controlDeps(env()), ctx.run.id, 'op#inside', 'stop the show')
          },
          { inline },
        ),
      ]
    })
    .concat(
      [false, true].flatMap((inline) => {
        const suffix = inline ? '-inline' : ''
        return [
          {
            kind: `test.hang${suffix}`,
            sideEffects: false,
            inline,
            validate: () => [],
            // Never resolves, and ignores its signal: only the runner's timeout ends it.
            execute: (ctx) => {
              bump(`hang${suffix}`)
              hangSignals.push(ctx.signal)
              return new Promise(() => {})
            },
          },
          // Changes the world outside showrunner: a rehearsal must not execute it.
          {
            ...customKind(
              `test.lights${suffix}`,
              (ctx) => bump(`lights${suffix}:${ctx.run.rehearsal ? 'rehearsal' : 'show'}`),
              {
                sideEffects: true,
                inline,
              },
            ),
            describe: (ctx) => `switch the lights to ${String(ctx.params.colour)}`,
          },
        ] satisfies AnyStepKind[]
      }),
    )
}

function setup(start: Date | number = Date.now()) {
  const clock = new TestClock(start)
  let env: RunnerTestEnv
  const registry = makeRegistry(kinds(() => env))
  env = { db: t.db, registry, clock }
  return { clock, env }
}

describe('a run walks its program', () => {
  it('log → cue (parked, waiting) → resolve → 1 s wait (not waiting, no lease) → ending phase → completed', async () => {
    // The runner's clock, not the database's, is the time that counts. Ten
    // minutes behind the database, any place that mixes the two shows: a cue
    // resolved "now" by the database clock would not be due for ten minutes, a
    // 1 s wait measured from a database timestamp would last ten minutes more.
    const { clock, env } = setup(Date.now() - 600_000)
    const def = await defineEvent(env, {
      program: program(
        [
          'announce',
          [{ kind: 'core.log', params: { message: 'hello {{definition.title}} in {{run.scope}}' } }],
        ],
        [
          'main',
          [
            { kind: 'core.cue', params: { prompt: 'Open the gates' } },
            { kind: 'core.wait', params: { seconds: 1 } },
          ],
        ],
        [
          'wrap-up',
          [
            { kind: 'core.cue', params: { prompt: 'Close the gates' } },
            { kind: 'core.log', params: { message: 'done' } },
          ],
          true,
        ],
      ),
    })
    // One step per claim, so every phase can be observed between ticks.
    const runner = new Runner({
      db: t.db,
      registry: env.registry,
      clock,
      maxStepsPerClaim: 1,
      instanceId: 'walk',
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, scope: 'hall', actor: 'op#1' })
    expect(run).toMatchObject({ status: 'scheduled', currentPhase: null })
    const listed = async () => (await listRuns(t.db, { definitionId: def.id }))[0]!
    const seen: string[] = []
    const observe = async () => {
      const r = await runOf(t.db, run.id)
      seen.push(`${r.status}/${r.currentPhase}`)
      return r
    }

    // Tick 1: started (program expanded into steps); the announce phase ran its
    // log step in the start, which spent the claim's one step and released the
    // run, due at once. The same tick then leases it again (the start comes
    // before the lease of due in-flight runs, and this clock stands still) and
    // the cue parks. Counted as waiting; no lease held while a person decides.
    await runner.tick()
    const [hello, cue1, wait, cue2, done] = await stepsOf(t.db, run.id)
    expect((await stepsSql.getById(t.db, hello!.id))?.status).toBe('completed')
    let r = await observe()
    expect(r).toMatchObject({
      status: 'running',
      currentPhase: 'main',
      waitingSteps: 1,
      claimedBy: null,
      claimExpiresAt: null,
      wakeAt: null,
    })
    expect((await listed()).waitingSteps).toBe(1)
    expect((await stepsSql.listWaiting(t.db)).map((s) => s.id)).toEqual([cue1!.id])
    // Ticking again (even much later) does not move a parked cue.
    clock.advance(60_000)
    await runner.tick()
    clock.advance(-60_000)
    expect(await runOf(t.db, run.id)).toMatchObject({
      currentPhase: 'main',
      waitingSteps: 1,
      claimedBy: null,
    })
    expect((await stepsSql.getById(t.db, wait!.id))?.status).toBe('pending')

    expect((await resolveCue(controlDeps(env), cue1!.id, 'op#1', 'gates open')).applied).toBe(true)
    // Tick 3: the 1 s wait begins: the run sleeps, holding no lease, and is NOT waiting on a person.
    await runner.tick()
    r = await observe()
    expect(r).toMatchObject({
      status: 'running',
      currentPhase: 'main',
      waitingSteps: 0,
      claimedBy: null,
      claimExpiresAt: null,
    })
    expect(r.wakeAt?.getTime()).toBe(clock.now().getTime() + 1000)
    expect((await listed()).waitingSteps).toBe(0)
    expect(await stepsSql.listWaiting(t.db)).toEqual([])
    expect(await stepsSql.getById(t.db, wait!.id)).toMatchObject({
      status: 'running',
      parked: false,
      claimedBy: null,
    })
    // Not due yet: a tick half-way changes nothing.
    clock.advance(500)
    await runner.tick()
    expect(await stepsSql.getById(t.db, wait!.id)).toMatchObject({ status: 'running', parked: false })

    // Tick 5: the timer is due; the wait completes.
    clock.advance(500)
    await runner.tick()
    expect((await stepsSql.getById(t.db, wait!.id))?.status).toBe('completed')
    // Tick 6: entering the ending phase moves the run to ENDING; the cue there parks.
    await runner.tick()
    r = await observe()
    expect(r).toMatchObject({ status: 'ending', currentPhase: 'wrap-up', waitingSteps: 1, claimedBy: null })
    expect((await resolveCue(controlDeps(env), cue2!.id, 'op#1', null)).applied).toBe(true)
    // Tick 7: the last log; tick 8: nothing left, completed.
    await runner.tick()
    expect((await stepsSql.getById(t.db, done!.id))?.status).toBe('completed')
    expect((await runOf(t.db, run.id)).status).toBe('ending')
    await runner.tick()
    r = await observe()
    expect(r).toMatchObject({
      status: 'completed',
      currentPhase: 'wrap-up',
      waitingSteps: 0,
      claimedBy: null,
      wakeAt: null,
    })
    expect(r.endedAt).not.toBeNull()
    expect(seen).toEqual(['running/main', 'running/main', 'ending/wrap-up', 'completed/wrap-up'])
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual([
      'completed',
      'completed',
      'completed',
      'completed',
      'completed',
    ])
    const log = await logLines(t.db, run.id)
    expect(log).toContain('hello Test event in hall')
    expect(log).toContain('waiting on a person: Open the gates')
    expect(log.at(-1)).toBe('done')
  })
})

describe.each([
  ['per-run engine', ''],
  ['batch path (inline kinds)', '-inline'],
])('pause and cancel take effect between two steps of one batch (%s)', (_, suffix) => {
  const body = (middle: string) =>
    program([
      'main',
      [
        { kind: 'core.log', params: { message: 'first' } },
        { kind: `test.count${suffix}`, params: { counter: `${middle}:before` } },
        { kind: middle },
        { kind: `test.count${suffix}`, params: { counter: `${middle}:after` } },
        { kind: 'core.log', params: { message: 'between' } },
        { kind: `test.count${suffix}`, params: { counter: `${middle}:after` } },
      ],
    ])

  it('a pause from inside a step stops the very next step; resume continues to completion', async () => {
    const middle = `test.pause-self${suffix}`
    const { clock, env } = setup()
    const def = await defineEvent(env, { program: body(middle) })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: `pause${suffix}` })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await runner.tick()
    expect(executed.get(`${middle}:before`)).toBe(1)
    expect(executed.get(`${middle}:after`)).toBeUndefined()
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'paused', claimedBy: null, wakeAt: null })
    expect((await stepsOf(t.db, run.id)).map((s) => s.status)).toEqual([
      'completed',
      'completed',
      'completed',
      'pending',
      'pending',
      'pending',
    ])

    // A paused run is never advanced by a tick.
    clock.advance(5000)
    await runner.tick()
    expect(executed.get(`${middle}:after`)).toBeUndefined()

    expect((await resumeRun(controlDeps(env), run.id, 'op#1')).applied).toBe(true)
    await runner.tick()
    expect(executed.get(`${middle}:after`)).toBe(2)
    expect((await runOf(t.db, run.id)).status).toBe('completed')
    expect((await stepsOf(t.db, run.id)).every((s) => s.status === 'completed')).toBe(true)
    const log = await logLines(t.db, run.id)
    expect(log.filter((l) => l === 'between')).toHaveLength(1)
    expect(log).toContain('pause by op#inside')
    expect(log).toContain('resume by op#1')
  })

  it('a cancel from inside a step stops the batch: the steps after it are CANCELLED', async () => {
    const middle = `test.cancel-self${suffix}`
    const { clock, env } = setup()
    const def = await defineEvent(env, { program: body(middle) })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: `cancel${suffix}` })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    await runner.tick()
    expect(executed.get(`${middle}:before`)).toBe(1)
    expect(executed.get(`${middle}:after`)).toBeUndefined()
    const r = await runOf(t.db, run.id)
    expect(r).toMatchObject({ status: 'cancelled', claimedBy: null, wakeAt: null })
    expect(r.lastError).toMatch(/cancelled by op#inside: stop the show/)
    const statuses = (await stepsOf(t.db, run.id)).map((s) => s.status)
    expect(statuses.slice(0, 2)).toEqual(['completed', 'completed'])
    expect(statuses.slice(3)).toEqual(['cancelled', 'cancelled', 'cancelled'])
    clock.advance(5000)
    await runner.tick()
    expect(executed.get(`${middle}:after`)).toBeUndefined()
    expect(await logLines(t.db, run.id)).not.toContain('between')
  })
})

describe.each([
  ['per-run engine', ''],
  ['inline kind', '-inline'],
])('per-step timeout (%s)', (_, suffix) => {
  it('a step that never resolves fails its attempt at timeoutSeconds, is retried, then fails the run', async () => {
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program([
        'main',
        [{ kind: `test.hang${suffix}`, timeoutSeconds: 1, retry: { attempts: 2, backoffSeconds: 1 } }],
      ]),
    })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: `timeout${suffix}` })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const started = Date.now()
    await runner.tick()
    expect(Date.now() - started).toBeGreaterThanOrEqual(950)
    expect(hangSignals.at(-1)?.aborted).toBe(true)
    let [step] = await stepsOf(t.db, run.id)
    expect(step).toMatchObject({ status: 'pending', attempts: 1, claimedBy: null })
    expect(step!.lastError).toMatch(/timed out after 1000 ms/)
    const waiting = await runOf(t.db, run.id)
    expect(waiting).toMatchObject({ status: 'running', health: 'degraded', claimedBy: null })
    // Due again when the retry is, not at once.
    expect(waiting.wakeAt?.getTime()).toBe(step!.wakeAt?.getTime())
    expect(waiting.wakeAt!.getTime()).toBeGreaterThan(clock.now().getTime())

    clock.advance(1000) // the backoff (0.5–1 s)
    await runner.tick()
    expect(executed.get(`hang${suffix}`)).toBe(2)
    ;[step] = await stepsOf(t.db, run.id)
    expect(step).toMatchObject({ status: 'failed', attempts: 2 })
    const r = await runOf(t.db, run.id)
    expect(r.status).toBe('failed')
    expect(r.lastError).toMatch(/test\.hang.*failed after 2 attempt\(s\): timed out after 1000 ms/)
  })
})

describe.each([
  ['per-run engine', ''],
  ['inline kind', '-inline'],
])('rehearsal of a custom kind with side effects (%s)', (_, suffix) => {
  it('is not executed: its intent is logged and it succeeds; the real show executes it', async () => {
    const { clock, env } = setup()
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'core.log', params: { message: 'before' } },
          { kind: `test.lights${suffix}`, params: { colour: 'blue' } },
          { kind: 'core.log', params: { message: 'after' } },
        ],
      ]),
    })
    const runner = new Runner({ db: t.db, registry: env.registry, clock, instanceId: `rehearse${suffix}` })
    const rehearsal = await startRun(controlDeps(env), {
      definitionId: def.id,
      rehearsal: true,
      actor: 'op#1',
    })
    await runner.tick()
    expect((await runOf(t.db, rehearsal.id)).status).toBe('completed')
    expect(executed.get(`lights${suffix}:rehearsal`)).toBeUndefined()
    const log = await logLines(t.db, rehearsal.id)
    expect(log).toContain('rehearsal: would switch the lights to blue')
    expect(log).toContain('after')

    const show = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    clock.advance(1)
    await runner.tick()
    expect((await runOf(t.db, show.id)).status).toBe('completed')
    expect(executed.get(`lights${suffix}:show`)).toBe(1)
  })
})
