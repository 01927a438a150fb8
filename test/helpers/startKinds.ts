/**
 * The step kinds and set-up shared by the start-transaction tests
 * (runner.start.test.ts, runner.startHandOn.test.ts): pure kinds that fail
 * once, never finish, hold their transaction on a gate or answer a result,
 * and the engine's dependencies for calling `startKeylessBatch` directly.
 * Each test file imports its own copy (vitest isolates files), so the
 * counters and the gate are per file.
 */
import type { Db } from '../../sql/db.ts'
import type { AnyStepKind } from '../../src/runner/steps/registry.ts'
import { StepFailure } from '../../src/runner/steps/types.ts'
import type { EngineDeps } from '../../src/runner/types.ts'
import { makeRegistry, type RunnerTestEnv, TestClock } from './runnerHarness.ts'

/** How many times the counting kinds ran; a test sets its counter to 0 first. */
export const calls = { flaky: 0, answer: 0 }

/** A gate a kind waits on: `reset()` before a test, `reached` when a start is inside it, `open()` to let it finish. */
export const gate = (() => {
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
export const pureKind = (kind: string, execute: AnyStepKind['execute']): AnyStepKind => ({
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
    calls.flaky++
    if (calls.flaky === 1) throw new StepFailure('first attempt fails')
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
    calls.answer++
    await ctx.log('info', 'answered')
    return { type: 'completed', result: { answer: 42, run: ctx.run.id } }
  }),
  {
    kind: 'test.answer-inline',
    sideEffects: false,
    inline: true,
    validate: () => [],
    execute: async () => {
      calls.answer++
      return { type: 'completed', result: { inline: true } }
    },
  },
  // Writes a line the database refuses (a level longer than its column).
  pureKind('test.bad-line', async (ctx) => {
    await ctx.log('x'.repeat(50) as 'info', 'refused')
    return { type: 'completed' }
  }),
]

/** A test clock and a runner environment on `db` with the kinds above. */
export function startSetup(db: Db, start: Date | number = Date.now()) {
  const clock = new TestClock(start)
  const env: RunnerTestEnv = { db, registry: makeRegistry(kinds), clock }
  return { clock, env }
}

export function engineDeps(env: RunnerTestEnv, owner = 'starter'): EngineDeps {
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
