/**
 * Stopping and database trouble, in real time: stop() returns within the lease
 * while a webhook is in flight, holds no claim afterwards, and the step is
 * either finished or aborted-and-retried; a runner whose database is
 * unreachable keeps running, counts its failed ticks and backs off.
 */
import { expect, it } from 'vitest'
import { createDb } from '../sql/db.ts'
import { startRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
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
  useReceiver,
  waitFor,
  waitForStatus,
} from './helpers/runnerHarness.ts'

const LEASE_MS = 2000

const t = useTestDb()
const receiver = useReceiver({ resetEach: true })

async function setup(path: string) {
  const registry = makeRegistry()
  const env: RunnerTestEnv = { db: t.db, registry, clock: systemClock }
  const def = await defineEvent(env, {
    program: program([
      'main',
      [
        { kind: 'core.webhook', params: { url: `${receiver.url}${path}` } },
        { kind: 'core.log', params: { message: 'after the webhook' } },
      ],
    ]),
  })
  const settings = { webhookAllow: parseAllowList(receiver.url).prefixes }
  const makeRunner = (instanceId: string) =>
    new Runner({ db: t.db, registry, instanceId, tickMs: 20, leaseMs: LEASE_MS, settings })
  const run = () => startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
  /** Start `instanceId`, start a run, and stop the runner while the run's webhook is in flight. */
  const stopDuringWebhook = async (instanceId: string) => {
    const runner = makeRunner(instanceId)
    runner.start()
    const r = await run()
    runner.nudge()
    await waitFor(() => receiver.pending().length === 1, { what: 'the webhook to be in flight' })
    const t0 = Date.now()
    await runner.stop()
    return { runner, r, took: Date.now() - t0 }
  }
  /** Another instance, `instanceId`, takes the run over and completes it. */
  const finishElsewhere = async (instanceId: string, runId: number) => {
    const next = makeRunner(instanceId)
    next.start()
    try {
      await waitForStatus(t.db, runId, 'completed')
    } finally {
      await next.stop()
    }
  }
  return { stopDuringWebhook, finishElsewhere }
}

async function claimsOf(instanceId: string): Promise<number> {
  const [row] = await t.db.query<{ n: number }>(
    `SELECT (SELECT COUNT(*) FROM event_runs WHERE claimed_by = ?) + (SELECT COUNT(*) FROM event_run_steps WHERE claimed_by = ?) AS n`,
    [instanceId, instanceId],
  )
  return Number(row?.n)
}

it('stop() during a webhook that never answers: returns within LEASE_MS, no claim left, the step is aborted and retried later', async () => {
  receiver.route('/hooks/hang', (_call, n) => (n === 1 ? { hold: true } : { status: 200 }))
  const { stopDuringWebhook, finishElsewhere } = await setup('/hooks/hang')
  const { runner, r, took } = await stopDuringWebhook('stop-abort')
  console.log(`stop() with a hung webhook returned in ${took} ms`)
  expect(took).toBeLessThan(LEASE_MS)
  expect(runner.state).toBe('stopped')
  expect(await claimsOf('stop-abort')).toBe(0)
  // The attempt was cut short (the receiver saw the client go away) and will be retried.
  expect(receiver.calls[0]?.aborted).toBe(true)
  const [hook, log] = await stepsOf(t.db, r.id)
  // Not the step's failure: the attempt is not counted and the run is not degraded.
  expect(hook).toMatchObject({ status: 'pending', attempts: 0, claimedBy: null })
  expect(hook!.lastError).toMatch(/shutting down/)
  expect(log!.status).toBe('pending')
  expect(await runOf(t.db, r.id)).toMatchObject({ status: 'running', health: 'ok', claimedBy: null })

  // Another instance retries it, with the same Idempotency-Key, and finishes the run.
  await finishElsewhere('stop-abort-next', r.id)
  expect(receiver.calls.map((c) => c.key)).toEqual([`${r.id}-${hook!.id}`, `${r.id}-${hook!.id}`])
})

it('stop() during a slow webhook that answers within the grace: the step finishes, the next one does not start', async () => {
  receiver.route('/hooks/slow', () => ({ status: 200, delayMs: 300 }))
  const { stopDuringWebhook, finishElsewhere } = await setup('/hooks/slow')
  const { runner, r, took } = await stopDuringWebhook('stop-finish')
  console.log(`stop() with a 300 ms webhook returned in ${took} ms`)
  expect(took).toBeLessThan(LEASE_MS)
  expect(runner.state).toBe('stopped')
  expect(await claimsOf('stop-finish')).toBe(0)
  const [hook, log] = await stepsOf(t.db, r.id)
  expect(hook).toMatchObject({ status: 'completed', attempts: 1 })
  expect(log!.status).toBe('pending')
  expect(await logLines(t.db, r.id)).not.toContain('after the webhook')
  // Released due now, so another instance takes it straight away.
  const released = await runOf(t.db, r.id)
  expect(released).toMatchObject({ status: 'running', claimedBy: null })
  expect(released.wakeAt!.getTime()).toBeLessThanOrEqual(Date.now())

  await finishElsewhere('stop-finish-next', r.id)
  expect(receiver.calls).toHaveLength(1)
})

it('a runner whose database is unreachable keeps running, counts tick errors, backs off, and still stops', async () => {
  const db = createDb('mysql://root@127.0.0.1:1/showrunner_nowhere', { connectTimeout: 500 })
  let tickErrors = 0
  const unavailable: boolean[] = []
  const runner = new Runner({
    db,
    registry: makeRegistry(),
    instanceId: 'no-db',
    tickMs: 20,
    observer: { tickError: () => tickErrors++ },
    logger: {
      info() {},
      debug() {},
      warn() {},
      error: (obj) =>
        unavailable.push((obj as { databaseUnavailable?: boolean }).databaseUnavailable === true),
    },
  })
  runner.start()
  await sleep(1500)
  expect(runner.state).toBe('active')
  // Backing off from 20 ms doubling: ~6 failed ticks in 1.5 s, where a fixed 20 ms
  // cadence would fail ~75 times.
  expect(tickErrors).toBeGreaterThanOrEqual(3)
  expect(tickErrors).toBeLessThanOrEqual(10)
  expect(unavailable.length).toBeGreaterThan(0)
  expect(unavailable.every(Boolean)).toBe(true)
  const t0 = Date.now()
  await runner.stop()
  expect(Date.now() - t0).toBeLessThan(LEASE_MS)
  expect(runner.state).toBe('stopped')
  await db.close()
})

it('a stop that lands while the loop works out its sleep ends the loop at once, not a tick later', async () => {
  // The read of the next wake-up time is held until the stop has been asked
  // for: the stop's wake finds no sleep to end, and the loop must not then
  // begin one (it used to sleep its whole tick, 10 s here).
  let holdNextWake: (() => void) | null = null
  let nextWakeAsked: (() => void) | null = null
  const asked = new Promise<void>((resolve) => {
    nextWakeAsked = resolve
  })
  const db = wrapStatements(t.db, 'execute', (real) => async (sql, params) => {
    if (
      sql.includes('FORCE INDEX (idx_evrun_wake)') &&
      sql.includes('wake_at > ?') &&
      holdNextWake === null
    ) {
      const held = new Promise<void>((resolve) => {
        holdNextWake = resolve
      })
      nextWakeAsked?.()
      await held
    }
    return real(sql, params)
  })
  const runner = new Runner({ db, registry: makeRegistry(), instanceId: 'stop-mid-wait', tickMs: 10_000 })
  runner.start()
  await asked
  const t0 = Date.now()
  const stopped = runner.stop()
  // Let the stop reach its wake, then let the read answer.
  await sleep(50)
  ;(holdNextWake as unknown as () => void)()
  await stopped
  expect(Date.now() - t0).toBeLessThan(2000)
  expect(runner.state).toBe('stopped')
})

it('a step still waiting for a place when the stop grace runs out is not begun: its webhook is never sent', async () => {
  // One place: the first run's webhook hangs in it, the second run's waits.
  // When the grace runs out the first is cut short and frees its place; the
  // second must then be handed back untouched, not sent after the stop.
  receiver.route('/hooks/queued', () => ({ hold: true }))
  const registry = makeRegistry()
  const env: RunnerTestEnv = { db: t.db, registry, clock: systemClock }
  const def = await defineEvent(env, {
    program: program(['main', [{ kind: 'core.webhook', params: { url: `${receiver.url}/hooks/queued` } }]]),
  })
  // Both runs are due before the runner starts, so one advance takes them together.
  const first = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
  const second = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
  const runner = new Runner({
    db: t.db,
    registry,
    instanceId: 'stop-queued',
    tickMs: 20,
    leaseMs: LEASE_MS,
    parallelism: 1,
    settings: { webhookAllow: parseAllowList(receiver.url).prefixes },
  })
  runner.start()
  await waitFor(() => receiver.pending().length === 1, { what: 'one webhook in flight' })
  await sleep(200)
  expect(receiver.calls).toHaveLength(1)
  await runner.stop({ graceMs: 100 })
  await sleep(300)
  expect(receiver.calls).toHaveLength(1)
  expect(await claimsOf('stop-queued')).toBe(0)
  for (const r of [first, second]) {
    const [hook] = await stepsOf(t.db, r.id)
    expect(hook).toMatchObject({ status: 'pending', attempts: 0, claimedBy: null })
    expect(hook!.lastError).toMatch(/shutting down/)
  }
})
