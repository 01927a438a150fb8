/**
 * Crash: a runner in a child process is SIGKILLed while webhooks are in flight.
 * Another instance (in this process, same short lease) finishes every run once
 * the dead instance's leases expire. Nothing is lost; nothing is done twice
 * except the steps that were in flight at the kill (at-least-once, one
 * Idempotency-Key, so the receiver can tell).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { afterAll, expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  statusCounts,
  useReceiver,
  waitFor,
} from './helpers/runnerHarness.ts'

const RUNS = 30
/** Webhook calls answered at once before the receiver starts holding requests open. */
const FAST_CALLS = 10
/** The child's parallelism (test/fixtures/crashRunner.ts): how many webhooks it has in flight at once. */
const PARALLELISM = 8
const LEASE_MS = 1500

const repoRoot = fileURLToPath(new URL('..', import.meta.url))
const fixture = fileURLToPath(new URL('./fixtures/crashRunner.ts', import.meta.url))

const t = useTestDb()
const receiver = useReceiver()
let child: ChildProcess | null = null
// Registered after the two above, so it runs before them: the child dies before the receiver closes.
afterAll(() => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
})

it('SIGKILL mid-batch: another instance finishes every run after the lease; only in-flight steps run twice', async () => {
  let holding = true
  receiver.route('/hooks/', (call) =>
    holding && call.seq > FAST_CALLS ? { hold: true } : { status: 200, delayMs: 10 },
  )
  const registry = makeRegistry()
  const def = await defineEvent(
    { db: t.db, registry, clock: systemClock },
    {
      graceSeconds: 3600,
      program: program([
        'main',
        [
          // timeoutSeconds 3: the in-flight steps' leases last 3 s + 5 s, so the survivor waits ~8 s for them.
          { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/slow` }, timeoutSeconds: 3 },
          { kind: 'core.log', params: { message: 'logged' } },
        ],
      ]),
    },
  )
  await materialiseDueRuns(t.db, def, RUNS)

  let childOutput = ''
  child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    cwd: repoRoot,
    env: {
      ...process.env,
      DB_URL: t.url,
      WEBHOOK_ALLOW: receiver.url,
      INSTANCE_ID: 'crash-child',
      LEASE_MS: String(LEASE_MS),
      TICK_MS: '50',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout?.on('data', (d: Buffer) => (childOutput += d.toString()))
  child.stderr?.on('data', (d: Buffer) => (childOutput += d.toString()))

  // Mid-batch: the first webhooks answered and their steps are recorded completed
  // (a batch writes each outcome as it comes, not when its round ends),
  // PARALLELISM webhooks are held open, the rest are begun and queued.
  try {
    await waitFor(
      async () => {
        if (receiver.pending().length < PARALLELISM) return false
        const done = await t.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
            WHERE r.definition_id = ? AND s.kind = 'core.webhook' AND s.status = 'completed'`,
          [def.id],
        )
        return Number(done[0]?.n) === FAST_CALLS
      },
      { timeoutMs: 20_000, intervalMs: 10, what: 'the child to complete the fast runs and hold 8 webhooks' },
    )
  } catch (err) {
    throw new Error(`${(err as Error).message}\nchild output:\n${childOutput}`)
  }
  const inFlight = new Set(receiver.pending().map((c) => c.key))
  child.kill('SIGKILL')
  await once(child, 'exit')
  holding = false
  receiver.releaseHeld()
  const claimedByChild = await t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE claimed_by = 'crash-child'`,
  )
  expect(inFlight.size).toBe(PARALLELISM)
  // The dead instance still holds leases on every run: none got past its round.
  expect(Number(claimedByChild[0]?.n)).toBe(RUNS)

  const survivor = new Runner({
    db: t.open(),
    registry,
    instanceId: 'survivor',
    tickMs: 50,
    leaseMs: LEASE_MS,
    settings: { webhookAllow: parseAllowList(receiver.url).prefixes },
  })
  const killedAt = Date.now()
  survivor.start()
  try {
    await waitFor(async () => (await statusCounts(t.db, def.id)).completed === RUNS, {
      timeoutMs: 30_000,
      intervalMs: 50,
      what: 'the survivor to complete every run',
    })
  } finally {
    await survivor.stop()
  }
  console.log(`crash: survivor finished ${RUNS} runs ${Date.now() - killedAt} ms after the kill`)

  // Nothing lost.
  expect(await statusCounts(t.db, def.id)).toEqual({ completed: RUNS })
  const perKey = receiver.countsByKey()
  expect(perKey.size).toBe(RUNS)
  // Nothing done twice, except what was in flight at the kill.
  const twice = [...perKey].filter(([, n]) => n > 1).map(([key]) => key)
  expect(twice.length).toBeLessThanOrEqual(inFlight.size)
  for (const key of twice) expect(inFlight.has(key)).toBe(true)
  for (const n of perKey.values()) expect(n).toBeLessThanOrEqual(2)
  // …and every step in flight was executed again (at least once), not lost…
  for (const key of inFlight) expect(perKey.get(key ?? '')).toBe(2)
  // …but only once the dead owner's lease on it had expired (taken when the step
  // began, just before its first call: max(LEASE_MS, 3 s timeout + 5 s) = 8 s).
  for (const key of inFlight) {
    const [first, second] = receiver.calls.filter((c) => c.key === key)
    expect(second!.receivedAt - first!.receivedAt).toBeGreaterThanOrEqual(7500)
  }
  // The log step ran once per run (none was in flight at the kill).
  const logged = await t.db.query<{ n: number; runs: number }>(
    `SELECT COUNT(*) AS n, COUNT(DISTINCT run_id) AS runs FROM event_run_logs WHERE message = 'logged'`,
  )
  expect(logged[0]).toMatchObject({ n: RUNS, runs: RUNS })
  const leftovers = await t.db.query<{ n: number }>(
    'SELECT COUNT(*) AS n FROM event_runs WHERE claimed_by IS NOT NULL',
  )
  expect(Number(leftovers[0]?.n)).toBe(0)
})
