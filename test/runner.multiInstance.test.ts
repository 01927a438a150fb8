/**
 * Three runner instances (three pools, as three processes would have) on one
 * database, in real time: 300 runs over 10 concurrency keys, each calling a
 * real webhook receiver. Every step executes exactly once, no key is ever held
 * by two live runs (sampled every ~10 ms on its own connection), and every run
 * completes.
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as runsSql from '../sql/eventRuns/index.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  program,
  type RunnerTestEnv,
  sleep,
  statusCounts,
  useReceiver,
  waitFor,
} from './helpers/runnerHarness.ts'

const RUNS = 300
const KEYS = 10

const t = useTestDb()
const receiver = useReceiver()

/** Samples the key invariant on its own connection until stopped; answers the violations seen. */
function startSampler(db: Db) {
  const violations: { key: string; runs: string }[] = []
  let samples = 0
  let stop = false
  const done = (async () => {
    while (!stop) {
      const rows = await db.query<{ k: string; ids: string }>(
        `SELECT concurrency_key AS k, GROUP_CONCAT(id) AS ids FROM event_runs
          WHERE concurrency_key IS NOT NULL AND status IN ('starting','running','paused','ending')
          GROUP BY concurrency_key HAVING COUNT(*) > 1`,
      )
      samples++
      for (const r of rows) violations.push({ key: r.k, runs: r.ids })
      await sleep(10)
    }
  })()
  return {
    violations,
    get samples() {
      return samples
    },
    async stop() {
      stop = true
      await done
    },
  }
}

it('3 instances, 300 runs, 10 keys: each step exactly once, one holder per key throughout, all COMPLETED', async () => {
  // A little latency, so runs of different keys overlap and instances interleave.
  receiver.route('/hooks/', () => ({ status: 200, delayMs: Math.floor(Math.random() * 15) }))
  const registry = makeRegistry()
  const env: RunnerTestEnv = { db: t.db, registry, clock: systemClock }
  const def = await defineEvent(env, {
    concurrencyKey: 'world:{{run.scope}}',
    graceSeconds: 3600,
    scopes: Array.from({ length: KEYS }, (_, i) => `w${i}`),
    program: program([
      'main',
      [
        {
          kind: 'core.webhook',
          params: { url: `${receiver.url}/hooks/{{run.scope}}`, body: { run: '{{run.scheduledFor}}' } },
        },
        { kind: 'core.log', params: { message: 'logged' } },
      ],
    ]),
  })
  // 300 occurrences, 30 per key, all due now (materialised in one statement).
  const base = Date.now() - 1000
  const created = await runsSql.materialiseMany(
    t.db,
    Array.from({ length: RUNS }, (_, i) => ({
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope: `w${i % KEYS}`,
      scheduledFor: new Date(base + i),
      timezone: 'UTC',
      concurrencyKey: `world:w${i % KEYS}`,
      startedBy: 'test',
    })),
  )
  expect(created).toBe(RUNS)

  const sampler = startSampler(t.open({ connectionLimit: 1 }))
  const settings = { webhookAllow: parseAllowList(receiver.url).prefixes }
  const runners = [1, 2, 3].map(
    (n) =>
      new Runner({ db: t.open(), registry, instanceId: `multi-${n}`, tickMs: 20, leaseMs: 10_000, settings }),
  )
  const started = Date.now()
  for (const r of runners) r.start()
  try {
    await waitFor(
      async () => {
        const counts = await statusCounts(t.db, def.id)
        return (
          (counts.completed ?? 0) + (counts.failed ?? 0) + (counts.missed ?? 0) + (counts.cancelled ?? 0) ===
          RUNS
        )
      },
      { timeoutMs: 60_000, intervalMs: 100, what: 'all 300 runs to end' },
    )
  } finally {
    await Promise.all(runners.map((r) => r.stop()))
    await sampler.stop()
  }
  const elapsed = Date.now() - started
  console.log(`3 instances: 300 runs in ${elapsed} ms; ${sampler.samples} invariant samples`)

  expect(await statusCounts(t.db, def.id)).toEqual({ completed: RUNS })
  expect(sampler.violations).toEqual([])
  expect(sampler.samples).toBeGreaterThan(10)

  // Exactly once: 300 distinct Idempotency-Keys, each seen once.
  const perKey = receiver.countsByKey()
  expect(perKey.size).toBe(RUNS)
  expect([...perKey.values()].filter((n) => n !== 1)).toEqual([])
  // …and the log step once per run.
  const logged = await t.db.query<{ n: number; runs: number }>(
    `SELECT COUNT(*) AS n, COUNT(DISTINCT run_id) AS runs FROM event_run_logs WHERE message = 'logged'`,
  )
  expect(logged[0]).toMatchObject({ n: RUNS, runs: RUNS })
  // Every step executed in exactly one attempt.
  const attempts = await t.db.query<{ attempts: number; n: number }>(
    'SELECT attempts, COUNT(*) AS n FROM event_run_steps GROUP BY attempts',
  )
  expect(attempts.map((a) => [Number(a.attempts), Number(a.n)])).toEqual([[1, RUNS * 2]])
  // The work was shared, and no claim or key lock is left behind.
  const owners = await t.db.query<{ owner: string }>(
    `SELECT DISTINCT actor AS owner FROM event_run_logs WHERE message = 'logged'`,
  )
  expect(owners.length).toBeGreaterThanOrEqual(2)
  const leftovers = await t.db.query<{ n: number }>(
    'SELECT (SELECT COUNT(*) FROM event_runs WHERE claimed_by IS NOT NULL) + (SELECT COUNT(*) FROM concurrency_locks) AS n',
  )
  expect(Number(leftovers[0]?.n)).toBe(0)
})
