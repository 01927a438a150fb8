/**
 * Overlap policies, per (definition, scope): an hourly show whose program waits
 * on a cue, so the run of one occurrence is still in progress when the next
 * comes due. Driven tick by tick with a hand-moved clock, on one runner and
 * with two runners (two pools, as two processes) ticking at once on one
 * database, 20 times each: exactly the outcome the policy names, and never two
 * runs in progress where the policy forbids it.
 */
import { describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as definitionsSql from '../sql/eventDefinitions.ts'
import type { OverlapPolicy } from '../sql/states.ts'
import { resolveCue } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const CUE = program(['main', [{ kind: 'core.cue', params: { prompt: 'go on?' } }]])
const HOUR = 3600_000
const REPEATS = 20

interface RunFacts {
  id: number
  status: string
  lastError: string | null
}

async function runsOf(db: Db, definitionId: number): Promise<RunFacts[]> {
  const rows = await db.query<Record<string, unknown>>(
    `SELECT id, status, last_error FROM event_runs WHERE definition_id = ? AND scheduled_for <= ?
      ORDER BY scheduled_for`,
    [definitionId, new Date('2100-01-01')],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    status: String(r.status),
    lastError: (r.last_error as string | null) ?? null,
  }))
}

const IN_PROGRESS = new Set(['starting', 'running', 'paused', 'ending'])

/** One show, two (or three) occurrences; answers the runs of the first three occurrences after each step. */
async function scenario(policy: OverlapPolicy, dbs: Db[], day: number) {
  const base = Date.UTC(2030, 0, 1 + day, 0, 30)
  const clock = new TestClock(base)
  const registry = makeRegistry()
  const env: RunnerTestEnv = { db: t.db, registry, clock }
  const def = await defineEvent(env, {
    schedule: '0 * * * *',
    overlap: policy,
    graceSeconds: 300,
    program: CUE,
  })
  const runners = dbs.map(
    (db, i) => new Runner({ db, registry, clock, horizonMs: 4 * HOUR, instanceId: `ov-${day}-${i}` }),
  )
  let maxInProgress = 0
  const tickAll = async () => {
    await Promise.all(runners.map((r) => r.tick()))
    const runs = await runsOf(t.db, def.id)
    maxInProgress = Math.max(maxInProgress, runs.filter((r) => IN_PROGRESS.has(r.status)).length)
    return runs
  }
  await tickAll() // materialise 01:00, 02:00, 03:00, 04:00
  clock.set(base + 30 * 60_000 + 1000) // 01:00:01: the first occurrence starts and waits on its cue
  const first = await tickAll()
  expect(first[0]?.status).toBe('running')
  clock.set(base + 90 * 60_000 + 1000) // 02:00:01: the second comes due while the first is in progress
  const second = await tickAll()
  const result = { def, clock, tickAll, second, third: second, maxInProgress: () => maxInProgress }
  if (policy === 'buffer_one') {
    clock.set(base + 150 * 60_000 + 1000) // 03:00:01: a third comes due; still in progress
    result.third = await tickAll()
    // The first run's cue is answered: it completes, and the held occurrence starts (long past its grace).
    const [cue] = await t.db.query<{ id: number }>(
      `SELECT s.id FROM event_run_steps s WHERE s.run_id = ? AND s.parked = 1`,
      [Number(first[0]?.id)],
    )
    await resolveCue(controlDeps(env), Number(cue?.id), 'operator#test')
    clock.advance(1000)
    await tickAll()
    clock.advance(10 * 60_000) // well past the third's grace window
    result.third = await tickAll()
    clock.advance(2000)
    result.third = await tickAll()
  }
  // Leave nothing of this show for the next round's runners.
  await definitionsSql.setState(t.db, def.id, 'paused')
  await t.db.run(
    `UPDATE event_runs SET status = 'cancelled', wake_at = NULL WHERE definition_id = ? AND status IN ('starting','running','paused','ending')`,
    [def.id],
  )
  return result
}

async function expectPolicy(policy: OverlapPolicy, dbs: Db[], day: number) {
  const { second, third, maxInProgress } = await scenario(policy, dbs, day)
  const [r1, r2] = second as [RunFacts, RunFacts]
  switch (policy) {
    case 'allow_all':
      expect([r1.status, r2.status]).toEqual(['running', 'running'])
      expect(maxInProgress()).toBe(2)
      break
    case 'skip':
      expect([r1.status, r2.status]).toEqual(['running', 'missed'])
      expect(r2.lastError).toContain(`run ${r1.id} `)
      expect(maxInProgress()).toBe(1)
      break
    case 'cancel_other':
      expect([r1.status, r2.status]).toEqual(['cancelled', 'running'])
      expect(r1.lastError).toContain(`newer run ${r2.id} `)
      expect(maxInProgress()).toBe(1)
      break
    case 'buffer_one': {
      // At 02:00 the second was held; at 03:00 the third took its place and the second became missed.
      expect(r2.status).toBe('scheduled')
      const [a, b, c] = third as [RunFacts, RunFacts, RunFacts]
      expect([a.status, b.status, c.status]).toEqual(['completed', 'missed', 'running'])
      expect(b.lastError).toContain(`newer run ${c.id} `)
      expect(maxInProgress()).toBe(1)
      break
    }
  }
}

const POLICIES: OverlapPolicy[] = ['allow_all', 'skip', 'buffer_one', 'cancel_other']

describe('overlap policies', () => {
  let day = 0
  for (const policy of POLICIES) {
    it(`${policy.toUpperCase()} on one runner`, async () => {
      await expectPolicy(policy, [t.db], day++)
    })
  }
  for (const policy of POLICIES) {
    it(`${policy.toUpperCase()} with two runners racing on one database, ${REPEATS}×`, async () => {
      const other = t.open()
      try {
        for (let i = 0; i < REPEATS; i++) await expectPolicy(policy, [t.db, other], day++)
      } finally {
        await other.close()
      }
    }, 120_000)
  }

  it('composes with a concurrency key: the key still blocks a run of another definition', async () => {
    const clock = new TestClock(Date.UTC(2031, 0, 1, 0, 30))
    const registry = makeRegistry()
    const env: RunnerTestEnv = { db: t.db, registry, clock }
    const a = await defineEvent(env, {
      schedule: '0 * * * *',
      overlap: 'skip',
      concurrencyKey: 'stage',
      program: CUE,
    })
    const b = await defineEvent(env, {
      schedule: '0 * * * *',
      overlap: 'skip',
      concurrencyKey: 'stage',
      program: CUE,
    })
    const runner = new Runner({ db: t.db, registry, clock, horizonMs: 2 * HOUR, instanceId: 'ov-key' })
    await runner.tick()
    clock.advance(30 * 60_000 + 1000)
    await runner.tick()
    const [ra] = await runsOf(t.db, a.id)
    const [rb] = await runsOf(t.db, b.id)
    // One of the two holds the key; the other waits on it (not skipped: no run of its own scope is in progress).
    expect([ra?.status, rb?.status].sort()).toEqual(['running', 'scheduled'])
  })
})
