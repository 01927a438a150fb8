/**
 * A step begun with its round keeps its run's and its own lease while it
 * waits for a place (RUNNER_PARALLELISM) and while it executes, however long
 * the wait. A round begins all its steps at once, then they take the places
 * in turn; a lease sized for one step's timeout ran out under a step still
 * waiting behind the others, and the runner's next pass (or another
 * instance) took the run over and called the webhook a second time.
 */
import { expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  useReceiver,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const receiver = useReceiver({ resetEach: true })

it('12 webhooks one at a time, 700 ms each, under a lease of 1 s and a 1 s step timeout: each called once', async () => {
  const RUNS = 12
  receiver.route('/hooks/', () => ({ status: 200, delayMs: 700 }))
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [
        {
          kind: 'core.webhook',
          params: { url: `${receiver.url}/hooks/go` },
          timeoutSeconds: 1,
          retry: { attempts: 1 },
        },
        { kind: 'core.log', params: { message: 'called' } },
      ],
    ]),
  })
  await materialiseDueRuns(t.db, def, RUNS)
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    clock: systemClock,
    instanceId: 'lease-wait',
    tickMs: 50,
    // A round's lease is its longest timeout plus 5 s (6 s here); the last
    // of 12 calls of 700 ms, one at a time, begins about 7.7 s after the round.
    leaseMs: 1000,
    parallelism: 1,
    settings: { webhookAllow: parseAllowList(`${receiver.url}/hooks/`).prefixes },
  })
  runner.start()
  try {
    await waitFor(
      async () => {
        const [row] = await t.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status IN ('completed','failed')`,
          [def.id],
        )
        return Number(row?.n) === RUNS
      },
      { timeoutMs: 40_000, intervalMs: 100, what: 'every run to end' },
    )
  } finally {
    await runner.stop()
  }
  const perKey = receiver.countsByKey()
  expect(perKey.size).toBe(RUNS)
  expect(
    [...perKey.entries()].filter(([, n]) => n > 1),
    'keys called more than once',
  ).toEqual([])
  const [done] = await t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status = 'completed'`,
    [def.id],
  )
  expect(Number(done?.n)).toBe(RUNS)
}, 60_000)
