/**
 * Leases are judged on the database's clock. Two runner instances whose own
 * clocks are a minute ahead and a minute behind real time share one database:
 * neither takes over a run (or a step) the other holds under a live lease, and
 * a lease whose owner is gone is still reclaimed once it has run out.
 */
import { expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import { startRun } from '../src/operations/runControls.ts'
import type { Clock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  customKind,
  defineEvent,
  makeRegistry,
  program,
  runOf,
  sleep,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

/** Real time, shifted: an instance whose clock is off by `offsetMs`. */
const skewed = (offsetMs: number): Clock => ({ now: () => new Date(Date.now() + offsetMs) })

it('instances 60 s ahead and 60 s behind do not take over each other’s live leases', async () => {
  let entered = 0
  let release!: () => void
  const held = new Promise<void>((resolve) => {
    release = resolve
  })
  const registry = makeRegistry([
    customKind(
      'test.hold',
      async () => {
        entered++
        await held
      },
      { sideEffects: true },
    ),
  ])
  const behind = skewed(-60_000)
  const ahead = skewed(60_000)
  const def = await defineEvent(
    { db: t.db, registry, clock: behind },
    { graceSeconds: 3600, program: program(['main', [{ kind: 'test.hold', params: {} }]]) },
  )
  // Due for both instances: two minutes ago in real time.
  const run = await startRun(controlDeps({ db: t.db, registry, clock: behind }), {
    definitionId: def.id,
    at: new Date(Date.now() - 120_000),
    actor: 'op#1',
  })
  const common = { db: t.db, registry, leaseMs: 5_000 }
  const a = new Runner({ ...common, clock: behind, instanceId: 'behind' })
  const b = new Runner({ ...common, clock: ahead, instanceId: 'ahead' })

  // The instance a minute behind takes the run and is in the middle of its step.
  const aTick = a.tick()
  await waitFor(() => (entered === 1 ? true : undefined), { timeoutMs: 10_000 })
  expect((await runOf(t.db, run.id)).claimedBy).toBe('behind')

  try {
    // By the ahead instance's clock that lease ran out a minute ago; by the database's it is live.
    for (let i = 0; i < 3; i++) {
      await b.tick()
      await sleep(50)
    }
    expect(entered).toBe(1)
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'running', claimedBy: 'behind' })
  } finally {
    release()
    await aTick
  }
  expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed' })
  expect(entered).toBe(1)
}, 30_000)

it('a lease whose owner is gone is reclaimed once it has run out, by either instance', async () => {
  const registry = makeRegistry()
  const program1 = program(['main', [{ kind: 'core.log', params: { message: 'picked up' } }]])
  for (const [name, offset] of [
    ['behind', -60_000],
    ['ahead', 60_000],
  ] as const) {
    const clock = skewed(offset)
    const def = await defineEvent({ db: t.db, registry, clock }, { graceSeconds: 3600, program: program1 })
    const run = await startRun(controlDeps({ db: t.db, registry, clock }), {
      definitionId: def.id,
      at: new Date(clock.now().getTime() - 1000),
      actor: 'op#1',
    })
    // A crashed owner (on this instance's clock) took it with a 200 ms lease and never came back.
    await runsSql.transition(t.db, run.id, 'scheduled', 'running')
    const now = clock.now()
    const leased = await runsSql.claimTickBatch(
      t.db,
      'crashed',
      'tok-crashed',
      new Date(now.getTime() + 200),
      now,
      10,
    )
    expect(leased.map((r) => r.id)).toEqual([run.id])
    const runner = new Runner({ db: t.db, registry, clock, instanceId: name, leaseMs: 5_000 })
    await runner.tick()
    // Still live on the database's clock: not taken.
    expect((await runOf(t.db, run.id)).claimedBy).toBe('crashed')
    await sleep(300)
    await runner.tick()
    await runner.tick()
    expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed' })
  }
}, 30_000)
