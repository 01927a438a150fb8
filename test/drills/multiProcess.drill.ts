/**
 * Drill: four server processes on one database, 2,000 runs over 20
 * concurrency keys, one process SIGKILLed midway.
 *
 * Four real `node --no-memory-reducer --import tsx src/cli.ts serve` processes (distinct ports and
 * INSTANCE_IDs, TICK_MS 100, LEASE_MS 3000) share a throwaway database on the
 * test MariaDB. The runs are made through the API (startRun with `at`, spread
 * over the four processes); the definition's key is `k:{{run.scope}}` over 20
 * scopes, and its program is a webhook (to a receiver in this process, on
 * 127.0.0.1, counting calls per Idempotency-Key) and a log line. When half the
 * runs have ended, one process is SIGKILLed while it has a webhook in flight
 * (the receiver holds calls open until one of the victim's is among them).
 *
 * Expected: every run ends (completed); the key invariant (no key held by two
 * runs in starting/running/paused/ending) holds in every sample, one every
 * 50 ms on its own connection; each webhook Idempotency-Key is called exactly
 * once, except the steps the killed process had in flight, which are called at
 * most twice (at-least-once); the survivors stop cleanly (SIGTERM → exit 0)
 * and leave no claim or key lock behind.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createTestDb, type TestDb } from '../helpers/db.ts'
import { startReceiver, type WebhookReceiver } from '../helpers/runnerHarness.ts'
import {
  codesOf,
  nonTerminal,
  postGql,
  report,
  type ServerProcess,
  SHOWRUNNER_TOKENS,
  sleep,
  spawnServer,
  startKeySampler,
  statusCounts,
  TOKENS,
  until,
} from './lib.ts'

const PROCESSES = 4
const RUNS = 2000
const KEYS = 20
const VICTIM = 1 // index of the process that is SIGKILLed
/** Requests in flight at once while making the runs. */
const CREATE_CONCURRENCY = 8

let t: TestDb
let receiver: WebhookReceiver
let servers: ServerProcess[] = []
/** While true the receiver holds new calls open, so the victim is killed mid-call. */
let holding = false

beforeAll(async () => {
  t = await createTestDb()
  receiver = await startReceiver()
  receiver.route('/hooks/', () =>
    holding ? { hold: true } : { status: 200, delayMs: 5 + Math.floor(Math.random() * 30) },
  )
})

afterAll(async () => {
  holding = false
  receiver?.releaseHeld()
  await Promise.all(servers.map((s) => s.stop(5000)))
  await receiver?.close()
  await t?.drop()
})

it('4 processes, 2,000 runs, 20 keys, one SIGKILLed midway: all terminal, key invariant held, each key once but the in-flight ones', async () => {
  const t0 = Date.now()
  servers = await Promise.all(
    Array.from({ length: PROCESSES }, (_, i) =>
      spawnServer({
        name: `p${i + 1}`,
        env: {
          DATABASE_URL: t.url,
          SHOWRUNNER_TOKENS,
          TICK_MS: '100',
          LEASE_MS: '3000',
          INSTANCE_ID: `drill-p${i + 1}`,
          WEBHOOK_ALLOW: receiver.url,
        },
        readyTimeoutMs: 60_000,
      }),
    ),
  )
  const spawnedMs = Date.now() - t0
  expect(new Set(servers.map((s) => s.url)).size).toBe(PROCESSES)
  const victim = servers[VICTIM] as ServerProcess
  const survivors = servers.filter((s) => s !== victim)

  const created = await postGql<{ createDefinition: { id: string } }>((servers[0] as ServerProcess).url, {
    query: 'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    variables: {
      input: {
        slug: 'four-processes',
        title: 'Four processes',
        graceSeconds: 3600,
        concurrencyKey: 'k:{{run.scope}}',
        program: {
          phases: [
            {
              name: 'main',
              steps: [
                {
                  kind: 'core.webhook',
                  params: { url: `${receiver.url}/hooks/{{run.scope}}`, body: { run: '{{run.id}}' } },
                  // Short, so the killed process's in-flight steps come back after ~10 s, not 35.
                  timeoutSeconds: 5,
                },
                { kind: 'core.log', params: { message: 'logged' } },
              ],
            },
          ],
        },
      },
    },
  })
  const defId = Number(created.body?.data?.createDefinition.id)
  expect(defId, JSON.stringify(created.body)).toBeGreaterThan(0)

  const sampler = startKeySampler(t.open({ connectionLimit: 1 }), 50)

  // ── 2,000 runs through the API, round-robin over the processes ─────
  const createdFrom = Date.now()
  const base = Date.now() - 60_000
  const failures: string[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < RUNS) {
        const i = next++
        const s = servers[i % PROCESSES] as ServerProcess
        const a = await postGql<{ startRun: { id: string } }>(
          s.url,
          {
            query:
              'mutation ($d: ID!, $s: String, $at: DateTime) { startRun(definitionId: $d, scope: $s, at: $at) { id } }',
            variables: { d: String(defId), s: `k${i % KEYS}`, at: new Date(base + i).toISOString() },
          },
          { token: TOKENS.operator, timeoutMs: 30_000 },
        )
        if (a.status !== 200 || !a.body?.data?.startRun?.id)
          failures.push(`${s.name} ${a.status} ${codesOf(a).join(',')} ${a.text}`)
      }
    }),
  )
  const createMs = Date.now() - createdFrom
  expect(failures.slice(0, 5)).toEqual([])
  expect(await statusCounts(t.db, defId).then((c) => Object.values(c).reduce((a, b) => a + b, 0))).toBe(RUNS)

  // ── Midway: SIGKILL one process while it has a webhook in flight ────
  const terminal = async () => {
    const c = await statusCounts(t.db, defId)
    return RUNS - nonTerminal(c)
  }
  await until('half the runs to end', async () => (await terminal()) >= RUNS / 2, {
    timeoutMs: 180_000,
    everyMs: 100,
  })
  const killFrom = Date.now()
  holding = true
  // Every call is held as it arrives; a held call of another process is let go
  // at the next look, so the others do not sit on all 20 keys while the victim
  // waits for one.
  const victimCall = await until(
    'a webhook call of the victim in flight',
    async () => {
      const held = receiver.pending().filter((c) => !!c.key)
      if (held.length === 0) return null
      const stepIds = held.map((c) => Number(c.key?.split('-')[1]))
      const rows = await t.db.query<{ id: number }>(
        `SELECT id FROM event_run_steps WHERE id IN (${stepIds.map(() => '?').join(',')}) AND claimed_by = ?`,
        [...stepIds, victim.instanceId],
      )
      if (rows.length > 0) return rows.length
      const others = new Set(held.map((c) => c.key))
      receiver.releaseHeld((c) => others.has(c.key))
      return null
    },
    { timeoutMs: 30_000, everyMs: 10 },
  ).catch(() => 0)
  victim.child.kill('SIGKILL')
  const killedAt = Date.now()
  const victimExit = await victim.exited
  holding = false
  receiver.releaseHeld()
  const terminalAtKill = await terminal()
  // Let MariaDB finish (or roll back) whatever the dead connections had sent.
  await sleep(300)
  const inFlight = await t.db.query<{ id: number; run_id: number; kind: string }>(
    `SELECT id, run_id, kind FROM event_run_steps WHERE claimed_by = ? AND status = 'running'`,
    [victim.instanceId],
  )
  const inFlightKeys = new Set(inFlight.map((s) => `${s.run_id}-${s.id}`))
  const runsHeldAtKill = await t.db.query<{ n: number }>(
    'SELECT COUNT(*) AS n FROM event_runs WHERE claimed_by = ?',
    [victim.instanceId],
  )

  // ── The survivors finish everything ─────────────────────────────────
  const finalCounts = await until(
    'every run to end',
    async () => {
      const c = await statusCounts(t.db, defId)
      return nonTerminal(c) === 0 ? c : null
    },
    { timeoutMs: 240_000, everyMs: 250 },
  )
  const doneAt = Date.now()
  await sampler.stop()

  // ── Figures ─────────────────────────────────────────────────────────
  const webhookSteps = await t.db.query<{ id: number; run_id: number; attempts: number }>(
    `SELECT s.id, s.run_id, s.attempts FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
      WHERE r.definition_id = ? AND s.kind = 'core.webhook'`,
    [defId],
  )
  const expectedKeys = new Set(webhookSteps.map((s) => `${s.run_id}-${s.id}`))
  const perKey = receiver.countsByKey()
  const missing = [...expectedKeys].filter((k) => !perKey.has(k))
  const unknown = [...perKey.keys()].filter((k) => !expectedKeys.has(k))
  const repeated = [...perKey.entries()].filter(([, n]) => n > 1)
  const repeatedOutsideInFlight = repeated.filter(([k]) => !inFlightKeys.has(k))
  // Step lines carry the instance that ran the step: who worked, and whether a
  // run's last step ran twice (only allowed for a step in flight at the kill).
  const loggedBy = await t.db.query<{ actor: string; n: number }>(
    `SELECT l.actor, COUNT(*) AS n FROM event_run_logs l JOIN event_runs r ON r.id = l.run_id
      WHERE r.definition_id = ? AND l.message = 'logged' GROUP BY l.actor ORDER BY l.actor`,
    [defId],
  )
  const inFlightSteps = new Set(inFlight.map((s) => Number(s.id)))
  const loggedTwice = (
    await t.db.query<{ run_id: number; step_id: number; actors: string }>(
      `SELECT l.run_id, l.step_id, GROUP_CONCAT(l.actor ORDER BY l.id) AS actors FROM event_run_logs l
         JOIN event_runs r ON r.id = l.run_id
        WHERE r.definition_id = ? AND l.message = 'logged' GROUP BY l.run_id, l.step_id HAVING COUNT(*) > 1`,
      [defId],
    )
  ).filter((r) => !inFlightSteps.has(Number(r.step_id)))
  // Every run holds exactly its two step rows: none lost, none expanded twice.
  const badlyExpanded = await t.db.query<{ run_id: number; n: number }>(
    `SELECT s.run_id, COUNT(*) AS n FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
      WHERE r.definition_id = ? GROUP BY s.run_id HAVING COUNT(*) <> 2`,
    [defId],
  )
  // What the survivors' own metrics say about their ticks (the keyed claim pass dominates them).
  const tickStats = await Promise.all(
    survivors.map(async (s) => {
      const text = await fetch(`${s.url}/metrics`, { signal: AbortSignal.timeout(5000) })
        .then((r) => r.text())
        .catch(() => '')
      const num = (re: RegExp) => Number(re.exec(text)?.[1] ?? Number.NaN)
      const sum = num(/^showrunner_tick_duration_seconds_sum(?:\{[^}]*\})? (\S+)$/m)
      const count = num(/^showrunner_tick_duration_seconds_count(?:\{[^}]*\})? (\S+)$/m)
      return {
        name: s.name,
        ticks: count,
        meanTickMs: Math.round((sum / count) * 1000),
        claimConflicts: num(/^showrunner_claim_conflicts_total(?:\{[^}]*\})? (\S+)$/m),
      }
    }),
  )
  const survivorExits = await Promise.all(survivors.map((s) => s.stop(20_000)))
  const leftovers = await t.db.query<{ claims: number; locks: number }>(
    `SELECT (SELECT COUNT(*) FROM event_runs WHERE claimed_by IS NOT NULL) AS claims,
            (SELECT COUNT(*) FROM concurrency_locks) AS locks`,
  )
  const figures = {
    processes: PROCESSES,
    runs: RUNS,
    keys: KEYS,
    spawnMs: spawnedMs,
    createMs,
    createRate: Math.round((RUNS / createMs) * 1000),
    killedAfterMs: killedAt - createdFrom,
    victimCallsHeldAtKill: victimCall,
    terminalAtKill,
    victimStepsInFlight: inFlight.length,
    victimWebhookStepsInFlight: inFlight.filter((s) => s.kind === 'core.webhook').length,
    victimRunsHeldAtKill: Number(runsHeldAtKill[0]?.n ?? 0),
    afterKillToAllTerminalMs: doneAt - killedAt,
    totalMs: doneAt - createdFrom,
    throughputRunsPerS: Math.round((RUNS / (doneAt - createdFrom)) * 10_000) / 10,
    runsByStatus: finalCounts,
    runsFinishedBy: Object.fromEntries(loggedBy.map((r) => [r.actor, Number(r.n)])),
    logStepsRunTwiceOutsideInFlight: loggedTwice.length,
    logStepsRunTwiceSample: loggedTwice.slice(0, 5).map((r) => `${r.run_id}:${r.actors}`),
    runsBadlyExpanded: badlyExpanded.length,
    webhookCalls: receiver.calls.length,
    distinctKeys: perKey.size,
    keysCalledTwiceOrMore: repeated.length,
    keysRepeatedOutsideInFlight: repeatedOutsideInFlight.length,
    maxCallsPerKey: Math.max(0, ...perKey.values()),
    keySamples: sampler.samples,
    keySamplesFailed: sampler.failedSamples,
    keyViolations: sampler.violations.length,
    victimExit,
    survivorTicks: tickStats,
    survivorExits,
    leftovers: leftovers[0],
    serverErrorLogLines: Object.fromEntries(servers.map((s) => [s.name, s.errorLines().length])),
    killHandlingMs: killedAt - killFrom,
  }
  report('four-processes', figures)
  for (const s of servers)
    for (const line of s.errorLines().slice(0, 3))
      console.log(`[drill:four-processes] ${s.name} error log: ${line.slice(0, 300)}`)
  if (sampler.violations.length > 0)
    console.log('[drill:four-processes] violations', sampler.violations.slice(0, 10))

  // ── Verdicts ────────────────────────────────────────────────────────
  expect(victimExit.signal).toBe('SIGKILL')
  expect(terminalAtKill).toBeLessThan(RUNS) // it really was midway
  expect(victimCall).toBeGreaterThan(0) // …with a webhook of the victim in flight
  expect(finalCounts).toEqual({ completed: RUNS })
  // No run started twice, no step run twice outside the kill: what showrunner exists to prevent.
  expect(badlyExpanded).toEqual([])
  expect(loggedTwice).toEqual([])
  expect(sampler.violations).toEqual([])
  expect(sampler.samples).toBeGreaterThan((doneAt - createdFrom) / 50 / 4)
  // Each step's webhook was called; only the victim's in-flight steps more than once, and at most twice.
  expect(missing).toEqual([])
  expect(unknown).toEqual([])
  expect(repeatedOutsideInFlight).toEqual([])
  expect(repeated.every(([, n]) => n <= 2)).toBe(true)
  // Every surviving process was working, and each stopped cleanly.
  for (const s of survivors) expect(figures.runsFinishedBy[s.instanceId] ?? 0, s.name).toBeGreaterThan(0)
  expect(survivorExits).toEqual(survivors.map(() => ({ code: 0, signal: null })))
  expect(leftovers[0]).toEqual({ claims: 0, locks: 0 })
}, 300_000)
