/**
 * Drill: the database goes away for 10 s under load and comes back.
 *
 * A private MariaDB (what `npm start` makes without DATABASE_URL, here in a
 * short temp dir so the unix socket path fits) serves one real server process
 * (`node --no-memory-reducer --import tsx src/cli.ts serve`, runner on, TICK_MS 100). Load: a
 * client starting a run every 100 ms (webhook → 1 s wait → webhook → ending
 * log, concurrency key per scope), a reader, and probes of /healthz and
 * /readyz every 200 ms. Midway the MariaDB is stopped (SIGTERM, as
 * `privateDb.stop()` does), kept down 10 s, and started again on the same
 * data dir.
 *
 * Expected: the process stays up and /healthz answers throughout; the API
 * answers DATABASE_UNAVAILABLE (and nothing else) while the database is down;
 * /readyz goes 503 and back to 200; the runner resumes; every run ends
 * terminal; no webhook step runs twice (one call per Idempotency-Key, one
 * attempt per step); no claim or key lock is left behind.
 *
 * The shared MariaDB on 127.0.0.1:3306 is never touched.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createDb, type Db } from '../../sql/db.ts'
import { type PrivateMariadb, startPrivateMariadb } from '../../src/privateMariadb.ts'
import { PROBE_SNAPSHOT_MS } from '../../src/server.ts'
import { startReceiver, type WebhookReceiver } from '../helpers/runnerHarness.ts'
import {
  codesOf,
  type GqlAnswer,
  nonTerminal,
  percentile,
  postGql,
  probe,
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

const OUTAGE_MS = 10_000
const BEFORE_MS = 5_000
const AFTER_MS = 5_000
const START_EVERY_MS = 100
const SCOPES = 16
/** Hard bound on load requests, whatever the timing. */
const MAX_STARTS = 600

let dir: string
let privateDb: PrivateMariadb | null = null
let server: ServerProcess | null = null
let receiver: WebhookReceiver
let inspect: Db | null = null
/** While true the receiver holds webhook calls open: steps in flight across the stop. */
let holding = false
/** Idempotency-Keys of the calls held open across the stop. */
const held: string[] = []

beforeAll(async () => {
  // Short: <tmp>/srdo-XXXXXX/mysqld.sock must stay under the 107-byte socket limit.
  dir = await mkdtemp(join(tmpdir(), 'srdo-'))
  privateDb = await startPrivateMariadb({ dir })
  receiver = await startReceiver()
  // Slow-ish receivers (100–300 ms); held open around the stop (see below).
  receiver.route('/hooks/', (call) => {
    if (!holding) return { status: 200, delayMs: 100 + Math.floor(Math.random() * 200) }
    held.push(call.key ?? '')
    return { hold: true }
  })
})

afterAll(async () => {
  if (server) await server.stop(5000)
  await inspect?.close().catch(() => {})
  await receiver?.close()
  await privateDb?.stop()
  if (dir) await rm(dir, { recursive: true, force: true })
})

type Phase = 'before' | 'stopping' | 'down' | 'starting' | 'after' | 'drain'

interface Sample {
  at: number
  phase: Phase
  status: number
  codes: string[]
  what: 'start' | 'read'
  ms: number
}

it('MariaDB stopped for 10 s under load: server up, DATABASE_UNAVAILABLE meanwhile, /readyz 503 → 200, runner resumes, every run terminal, no step twice', async () => {
  const p = privateDb as PrivateMariadb
  server = await spawnServer({
    name: 'outage',
    env: {
      DATABASE_URL: p.url,
      SHOWRUNNER_TOKENS,
      TICK_MS: '100',
      LEASE_MS: '3000',
      INSTANCE_ID: 'drill-outage',
      WEBHOOK_ALLOW: receiver.url,
      STATUS_POLL_MS: '100',
    },
  })
  const s = server
  inspect = createDb(p.url, { connectionLimit: 2 })

  const created = await postGql<{ createDefinition: { id: string } }>(s.url, {
    query: 'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    variables: {
      input: {
        slug: 'outage-drill',
        title: 'Outage drill',
        graceSeconds: 3600,
        concurrencyKey: 'stage:{{run.scope}}',
        program: {
          phases: [
            {
              name: 'announce',
              steps: [
                {
                  kind: 'core.webhook',
                  params: { url: `${receiver.url}/hooks/announce`, body: { run: '{{run.id}}' } },
                  timeoutSeconds: 20,
                },
                { kind: 'core.wait', params: { seconds: 1 } },
              ],
            },
            {
              name: 'main',
              steps: [
                { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/main` }, timeoutSeconds: 20 },
              ],
            },
            { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
          ],
        },
      },
    },
  })
  const defId = Number(created.body?.data?.createDefinition.id)
  expect(defId, JSON.stringify(created.body)).toBeGreaterThan(0)

  // ── Load and probes, tagged with the phase they ran in ──────────────
  let phase: Phase = 'before'
  let loadOn = true
  const samples: Sample[] = []
  const probes: { at: number; phase: Phase; healthz: number; readyz: number }[] = []
  const startedIds = new Set<number>()
  let starts = 0

  const starter = (async () => {
    while (loadOn && starts < MAX_STARTS) {
      const t0 = Date.now()
      const i = starts++
      const a: GqlAnswer<{ startRun: { id: string } }> = await postGql(
        s.url,
        {
          query: 'mutation ($d: ID!, $s: String) { startRun(definitionId: $d, scope: $s) { id } }',
          variables: { d: String(defId), s: `s${i % SCOPES}` },
        },
        { token: TOKENS.operator, timeoutMs: 10_000 },
      )
      samples.push({ at: t0, phase, status: a.status, codes: codesOf(a), what: 'start', ms: a.ms })
      const id = Number(a.body?.data?.startRun?.id)
      if (id > 0) startedIds.add(id)
      await sleep(Math.max(0, START_EVERY_MS - (Date.now() - t0)))
    }
  })()
  const reader = (async () => {
    for (let i = 0; loadOn && i < 2000; i++) {
      const t0 = Date.now()
      const a = await postGql(
        s.url,
        { query: '{ runs(limit: 20) { id status waitingSteps } health { ok database } }' },
        { token: TOKENS.viewer, timeoutMs: 10_000 },
      )
      samples.push({ at: t0, phase, status: a.status, codes: codesOf(a), what: 'read', ms: a.ms })
      await sleep(Math.max(0, 150 - (Date.now() - t0)))
    }
  })()
  let probing = true
  const prober = (async () => {
    for (let i = 0; probing && i < 3000; i++) {
      const t0 = Date.now()
      const [healthz, readyz] = await Promise.all([probe(s.url, '/healthz'), probe(s.url, '/readyz')])
      probes.push({ at: t0, phase, healthz, readyz })
      await sleep(Math.max(0, 200 - (Date.now() - t0)))
    }
  })()
  // Key invariant, on its own connection (fails, uncounted, while the database is down).
  const samplerDb = createDb(p.url, { connectionLimit: 1 })
  const sampler = startKeySampler(samplerDb, 50)

  const t0 = Date.now()
  await sleep(BEFORE_MS)

  // ── The outage ──────────────────────────────────────────────────────
  // Make sure webhooks are in flight when the database goes: hold new calls
  // open until a few are waiting, stop MariaDB, then answer them (200) while
  // it is down. Their steps ran; only writing that down has to wait.
  holding = true
  await until('a webhook call held in flight', () => held.length >= 1, { timeoutMs: 15_000, everyMs: 10 })
  await sleep(300) // the rest of that tick's batch joins it
  const heldKeys = [...held]
  phase = 'stopping'
  const stopAt = Date.now()
  await p.stop()
  const downAt = Date.now()
  phase = 'down'
  await sleep(1000)
  holding = false
  receiver.releaseHeld()
  await sleep(OUTAGE_MS - 1000)
  phase = 'starting'
  const restartAt = Date.now()
  privateDb = await startPrivateMariadb({ dir })
  const upAt = Date.now()
  phase = 'after'
  expect(privateDb.url).toBe(p.url)

  // The runner resumes: a tick after the database came back.
  const resumedAt = await until(
    'the runner to tick again after the restart',
    async () => {
      const [hb] = await (inspect as Db).query<{ last_tick_at: Date }>(
        'SELECT last_tick_at FROM runner_heartbeats WHERE instance_id = ?',
        ['drill-outage'],
      )
      return hb && hb.last_tick_at.getTime() > upAt ? Date.now() : null
    },
    { timeoutMs: 45_000, everyMs: 50 },
  )
  const readyAgainAt = await until(
    '/readyz to answer 200 again',
    async () => ((await probe(s.url, '/readyz')) === 200 ? Date.now() : null),
    { timeoutMs: 30_000, everyMs: 50 },
  )
  await sleep(AFTER_MS)
  loadOn = false
  await Promise.all([starter, reader])
  phase = 'drain'

  // ── Every run ends terminal ─────────────────────────────────────────
  const drainFrom = Date.now()
  const finalCounts = await until(
    'every run to end',
    async () => {
      const counts = await statusCounts(inspect as Db, defId)
      return nonTerminal(counts) === 0 ? counts : null
    },
    { timeoutMs: 90_000, everyMs: 250 },
  )
  const drainMs = Date.now() - drainFrom
  probing = false
  await prober
  await sampler.stop()
  await samplerDb.close()

  // ── Figures ─────────────────────────────────────────────────────────
  const totalRuns = Object.values(finalCounts).reduce((a, b) => a + b, 0)
  const steps = await (inspect as Db).query<{
    id: number
    run_id: number
    kind: string
    status: string
    attempts: number
  }>(
    `SELECT s.id, s.run_id, s.kind, s.status, s.attempts FROM event_run_steps s
       JOIN event_runs r ON r.id = s.run_id WHERE r.definition_id = ?`,
    [defId],
  )
  const webhookKeys = steps.filter((x) => x.kind === 'core.webhook').map((x) => `${x.run_id}-${x.id}`)
  const perKey = receiver.countsByKey()
  const duplicates = [...perKey.entries()].filter(([, n]) => n > 1)
  // A webhook attempted twice is a second call; a core.log whose write failed while
  // the database was down did nothing the first time, so only webhooks count.
  const reattempted = steps.filter((x) => x.kind === 'core.webhook' && Number(x.attempts) > 1)
  const attemptsOver1 = steps.filter((x) => Number(x.attempts) > 1).length
  const leftovers = await (inspect as Db).query<{ claims: number; locks: number }>(
    `SELECT (SELECT COUNT(*) FROM event_runs WHERE claimed_by IS NOT NULL) AS claims,
            (SELECT COUNT(*) FROM concurrency_locks) AS locks`,
  )
  const inPhase = (ph: Phase) => samples.filter((x) => x.phase === ph)
  const byCodes = (list: Sample[]) => {
    const out: Record<string, number> = {}
    for (const x of list) {
      const k = `${x.status}:${x.codes.length ? [...new Set(x.codes)].join('+') : 'ok'}`
      out[k] = (out[k] ?? 0) + 1
    }
    return out
  }
  const down = inPhase('down')
  // /readyz answers from a snapshot up to PROBE_SNAPSHOT_MS old, so the first
  // probes of the outage may still see the last good answer.
  const readyzDown = probes
    .filter((x) => x.phase === 'down' && x.at >= downAt + PROBE_SNAPSHOT_MS)
    .map((x) => x.readyz)
  const healthzAll = probes.map((x) => x.healthz)
  const latencies = samples.filter((x) => x.codes.length === 0).map((x) => x.ms)
  const figures = {
    outageMs: restartAt - downAt,
    mariadbStopMs: downAt - stopAt,
    mariadbStartMs: upAt - restartAt,
    runnerResumedAfterMs: resumedAt - upAt,
    readyzBackAfterMs: readyAgainAt - upAt,
    drainMs,
    totalMs: Date.now() - t0,
    runs: totalRuns,
    runsByStatus: finalCounts,
    startRequests: starts,
    startRunsAnswered: startedIds.size,
    apiAnswers: {
      before: byCodes(inPhase('before')),
      stopping: byCodes(inPhase('stopping')),
      down: byCodes(down),
      starting: byCodes(inPhase('starting')),
      after: byCodes(inPhase('after')),
    },
    readyzWhileDown: [...new Set(readyzDown)],
    healthzStatuses: [...new Set(healthzAll)],
    probes: probes.length,
    webhooksInFlightAtStop: heldKeys.length,
    webhookSteps: webhookKeys.length,
    webhookCalls: receiver.calls.length,
    duplicateKeys: duplicates.length,
    webhookStepsWithAttemptsOver1: reattempted.length,
    anyStepsWithAttemptsOver1: attemptsOver1,
    keySamples: sampler.samples,
    keySamplesFailed: sampler.failedSamples,
    keyViolations: sampler.violations.length,
    leftovers: leftovers[0],
    serverErrorLogLines: s.errorLines().length,
    apiOkLatencyMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) },
    downAnswerLatencyMs: {
      p50: percentile(
        down.map((x) => x.ms),
        50,
      ),
      max: Math.max(0, ...down.map((x) => x.ms)),
    },
  }
  report('db-outage', figures)
  for (const line of s.errorLines().slice(0, 5))
    console.log(`[drill:db-outage] server error log: ${line.slice(0, 300)}`)
  if (duplicates.length > 0 || reattempted.length > 0) {
    console.log('[drill:db-outage] steps executed more than once:', {
      duplicates: duplicates.slice(0, 20),
      reattempted: reattempted.slice(0, 20),
    })
  }

  // ── Verdicts ────────────────────────────────────────────────────────
  // The process stayed up and /healthz answered 200 at every probe, outage included.
  expect(s.alive(), s.tail()).toBe(true)
  expect(
    healthzAll.every((c) => c === 200),
    JSON.stringify(figures.healthzStatuses),
  ).toBe(true)
  // While the database was down the API answered, and only with DATABASE_UNAVAILABLE.
  expect(down.length).toBeGreaterThan(20)
  for (const x of down) {
    expect(x.status, JSON.stringify(x)).toBeGreaterThan(0)
    expect(x.status, JSON.stringify(x)).toBeLessThan(500)
    expect(x.codes.length, JSON.stringify(x)).toBeGreaterThan(0)
    expect(new Set(x.codes), JSON.stringify(x)).toEqual(new Set(['DATABASE_UNAVAILABLE']))
  }
  // No answer at any point was a 5xx or an internal error.
  expect(samples.filter((x) => x.status >= 500 || x.status === 0)).toEqual([])
  expect(samples.filter((x) => x.codes.includes('INTERNAL_SERVER_ERROR'))).toEqual([])
  // /readyz: 200 before, 503 while down, 200 after.
  expect(probes.filter((x) => x.phase === 'before').every((x) => x.readyz === 200)).toBe(true)
  expect(readyzDown.length).toBeGreaterThan(10)
  expect(
    readyzDown.every((c) => c === 503),
    JSON.stringify(readyzDown),
  ).toBe(true)
  expect(probes.filter((x) => x.phase === 'drain').every((x) => x.readyz === 200)).toBe(true)
  // Runs were made before and after the outage, and every one of them ended, completed.
  expect(inPhase('before').filter((x) => x.what === 'start' && x.codes.length === 0).length).toBeGreaterThan(
    20,
  )
  expect(inPhase('after').filter((x) => x.what === 'start' && x.codes.length === 0).length).toBeGreaterThan(
    20,
  )
  expect(finalCounts).toEqual({ completed: totalRuns })
  // No step ran twice: one webhook call per Idempotency-Key, each key a real step, one attempt per webhook step.
  expect(duplicates).toEqual([])
  expect(new Set(perKey.keys())).toEqual(new Set(webhookKeys))
  expect(reattempted).toEqual([])
  // …including the steps whose webhook answered while the database was down.
  expect(heldKeys.length).toBeGreaterThanOrEqual(1)
  for (const key of heldKeys) expect(perKey.get(key), `calls with Idempotency-Key ${key}`).toBe(1)
  // The key invariant held whenever it could be sampled; nothing is left held.
  expect(sampler.violations).toEqual([])
  expect(sampler.samples).toBeGreaterThan(100)
  expect(leftovers[0]).toEqual({ claims: 0, locks: 0 })
}, 150_000)
