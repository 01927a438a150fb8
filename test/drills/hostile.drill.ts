/**
 * Drill: a minute of hostile traffic against one server process while its
 * runner has runs coming due every second.
 *
 * The server is what `npm start` runs (`node --no-memory-reducer --import tsx src/cli.ts serve`:
 * a real configuration from the environment, the runner on, the default
 * TICK_MS), on a throwaway database. Before the flood, runs are booked with
 * `startRun(at:)` one second apart across the flood. Then, for FLOOD_MS, a
 * bounded hostile client on loopback (test/drills/hostileFlood.ts) sends:
 * malformed requests over raw sockets, alias, token and occurrence floods,
 * introspection floods, guessed tokens, scrape floods of /metrics and /readyz,
 * 500 subscriptions on one WebSocket and sockets that never say who they are.
 * Every loop is bounded in count and in time. The /healthz prober is a child
 * process of its own (test/drills/hostileClients.ts).
 *
 * Expected: the process stays up and logs no error; every hostile request is
 * refused (a 4xx, or over WebSocket an error naming the limit); `/healthz`
 * p99 stays under 100 ms; each booked run starts within 2 × TICK_MS of its
 * time. The figures are printed as `[drill:hostile] {...}`.
 *
 * A second case sends the third round's findings (test/drills/hostileRound3.ts):
 * heavy answers six at once, a secret straddling each truncation, joined
 * placeholders and a principal creating past its runs per minute. Expected:
 * each is closed, the process stays up with its peak RSS under 1 GB, and
 * `/healthz` p99 stays under 100 ms throughout, from 200+ samples
 * (`[drill:hostile-round3]`, with the server's own event-loop delay).
 *
 * A third keeps 2,000 viewer requests in flight (finding 10: `/healthz`
 * waited behind them) until a prober has 250 samples of `/healthz`. It is
 * probed in two phases: the storm, while the 2,000 connections open at once
 * and are refused in step, until every client has had an answer (each
 * `/healthz` under 1 s); then the burst proper, 2,000 requests in flight on
 * open connections. Expected: each answer is the data or BUSY (503), the
 * admission limiter engaged, the process stays up, and `/healthz` p99 stays
 * under 100 ms in the burst proper (`[drill:hostile-burst]`, with the
 * server's own event-loop delay and CPU seconds). Like the others, the bound
 * is twice the quiet machine's p99 when that is over 50 ms. Each prober's
 * first request is not counted: it is the prober's own start-up.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { setPriority } from 'node:os'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createTestDb, type TestDb } from '../helpers/db.ts'
import {
  BURSTER,
  cpuSeconds,
  healthzBound,
  latencyFigures,
  loopDelay,
  probeInChild,
} from './hostileClients.ts'
import { hostileTraffic } from './hostileFlood.ts'
import { roundThree, startEchoReceiver } from './hostileRound3.ts'
import {
  percentile,
  postGql,
  report,
  type ServerProcess,
  SHOWRUNNER_TOKENS,
  sleep,
  spawnServer,
  TOKENS,
} from './lib.ts'

/** How long the hostile client runs. */
const FLOOD_MS = Number(process.env.DRILL_HOSTILE_MS ?? 60_000)
/** The default tick, as `npm start` runs it. */
const TICK_MS = 1000
/** Runs are booked from this far into the flood, one a second. */
const FIRST_RUN_AFTER_MS = 3000
/** While 2,000 connections open at once, the longest /healthz may take (finding 10 saw 5 s time-outs). */
const STORM_MAX_MS = 1000

let t: TestDb
let server: ServerProcess | null = null
beforeAll(async () => {
  t = await createTestDb()
})
afterAll(async () => {
  await server?.stop()
  await t?.drop()
})

/** A one-step show (`core.log` with `message`) titled as its slug; answers its id, or fails naming the answer. */
async function createLogShow(url: string, slug: string, message: string): Promise<string> {
  const created = await postGql<{ createDefinition: { id: string } }>(url, {
    query:
      'mutation ($s: String!, $p: JSON!) { createDefinition(input: { slug: $s, title: $s, program: $p }) { id } }',
    variables: {
      s: slug,
      p: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message } }] }] },
    },
  })
  const id = created.body?.data?.createDefinition.id
  if (!id) throw new Error(`createDefinition ${slug} failed: ${JSON.stringify(created.body)}`)
  return id
}

it(`${FLOOD_MS / 1000} s of hostile traffic: the server stays up, /healthz p99 < 100 ms, runs start on time`, {
  timeout: FLOOD_MS + 60_000,
}, async () => {
  server = await spawnServer({
    name: 'hostile',
    env: { DATABASE_URL: t.url, SHOWRUNNER_TOKENS, INSTANCE_ID: 'drill-hostile', RUNNER: 'on' },
  })
  const s = server
  // The same probe with no flood, so the figures say what the machine itself adds.
  const quiet = (await probeInChild(`${s.url}/healthz`, 3000, 50)).latencies
  const defId = await createLogShow(s.url, 'hostile', 'on time')

  // Book one run a second across the flood (startRun is idempotent on its time).
  const floodStart = Date.now() + 1000
  const end = floodStart + FLOOD_MS
  const dueTimes: Date[] = []
  for (let at = floodStart + FIRST_RUN_AFTER_MS; at < end - 2000; at += 1000) dueTimes.push(new Date(at))
  const runIds: string[] = []
  for (const at of dueTimes) {
    const r = await postGql<{ startRun: { id: string } }>(s.url, {
      query: `mutation { startRun(definitionId: "${defId}", at: "${at.toISOString()}") { id } }`,
    })
    const id = r.body?.data?.startRun.id
    expect(id, JSON.stringify(r.body)).toBeTruthy()
    runIds.push(id as string)
  }
  while (Date.now() < floodStart) await sleep(10)

  const problems: string[] = []
  const healthz: number[] = []

  // The /healthz prober is a process of its own, so the hostile client's work in
  // this process does not count as the server's latency.
  const prober = probeInChild(`${s.url}/healthz`, end - Date.now(), 50).then((r) => {
    healthz.push(...r.latencies)
    problems.push(...r.problems)
    return r.latencies.length
  })

  const [probes, traffic] = await Promise.all([prober, hostileTraffic(s, end, runIds)])
  problems.push(...traffic.problems)
  const tallies = traffic.tallies

  // Let the last booked run come due and start.
  await sleep(2 * TICK_MS)
  const rows = await t.db.query<{ id: number; scheduled_for: Date; started_at: Date | null }>(
    `SELECT id, scheduled_for, started_at FROM event_runs WHERE id IN (${runIds.map(() => '?').join(',')})`,
    runIds,
  )
  const lags = rows.map((r) =>
    r.started_at ? r.started_at.getTime() - r.scheduled_for.getTime() : Number.POSITIVE_INFINITY,
  )
  const healthzAfter = await fetch(`${s.url}/healthz`).then((r) => r.status)
  const gqlAfter = await postGql(s.url, { query: '{ definitions { id } }' }, { token: TOKENS.viewer })

  const figures = {
    floodMs: FLOOD_MS,
    tickMs: TICK_MS,
    requests: probes + traffic.sent + 520,
    healthzQuiet: { p50Ms: Math.round(percentile(quiet, 50)), p99Ms: Math.round(percentile(quiet, 99)) },
    healthzP99BoundMs: healthzBound(quiet),
    healthz: latencyFigures(healthz),
    runs: {
      booked: runIds.length,
      started: lags.filter(Number.isFinite).length,
      lagP50Ms: percentile(lags, 50),
      lagMaxMs: Math.max(...lags),
      /** Runs that started more than one tick late: [seconds into the flood, lag ms]. */
      late: rows
        .map((r, i) => [Math.round((r.scheduled_for.getTime() - floodStart) / 1000), lags[i] as number])
        .filter(([, lag]) => (lag as number) > TICK_MS),
    },
    tallies,
    problems: problems.slice(0, 10),
    serverErrorLogLines: s.errorLines().length,
    /** The runner's own account of any pass slower than a tick. */
    slowPasses: s.slowPassLines(),
  }
  report('hostile', figures)

  expect(s.alive(), s.tail()).toBe(true)
  expect(healthzAfter).toBe(200)
  expect(gqlAfter.body?.errors).toBeUndefined()
  expect(problems).toEqual([])
  expect(s.errorLines()).toEqual([])
  expect(figures.healthz.p99Ms).toBeLessThan(figures.healthzP99BoundMs)
  expect(rows).toHaveLength(runIds.length)
  expect(figures.runs.lagMaxMs, s.slowPassLines().join('\n')).toBeLessThan(2 * TICK_MS)
  expect(tallies.websocket).toMatchObject({ served: 100, refused: 400, closedWhileOpen: 0 })
  expect(tallies.idleSockets).toEqual({ 4408: 20 })
})

it('the third round: heavy answers, truncation edges, joined placeholders, runs per minute; all closed', {
  timeout: 180_000,
}, async () => {
  const db = await createTestDb()
  const receiver = await startEchoReceiver()
  const secret = `s3cr3t-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`
  let s: ServerProcess | null = null
  try {
    s = await spawnServer({
      name: 'hostile-round3',
      env: {
        DATABASE_URL: db.url,
        SHOWRUNNER_TOKENS,
        INSTANCE_ID: 'drill-hostile-round3',
        RUNNER: 'on',
        TICK_MS: '200',
        WEBHOOK_ALLOW: `${receiver.origin}/`,
        SHOWRUNNER_SECRET_HOOK: secret,
        // A 1 MB params reaches startRun (and is refused there) instead of the body limit.
        MAX_BODY_BYTES: String(2 * 1024 * 1024),
        // At most one backfill of 1,000 a minute, so a few in a row meet the quota.
        MAX_RUNS_PER_MINUTE: '1500',
      },
    })
    const quiet = (await probeInChild(`${s.url}/healthz`, 2000, 20)).latencies
    // One prober for the whole round, every 2 ms. The round lasts about a
    // second: probed every 20 ms (by a prober restarted every 2 s) it gave
    // 75-135 samples, so its "p99" was the round's slowest answer or the one
    // before it, and one stall of a loaded machine decided the test (a CI run
    // read 104 ms against 100). Every 2 ms gives about 300; fewer than 200
    // fails the test rather than passing or failing it on a maximum.
    const server = s
    const round = roundThree(server, db.db, receiver, secret)
    const probing = probeInChild(
      `${server.url}/healthz`,
      120_000,
      2,
      0,
      round.catch(() => {}),
    )
    const result = await round
    const probe = await probing
    const healthz = probe.latencies
    const serverLoopDelay = await loopDelay(server.url)
    const figures = {
      ...result.figures,
      healthzQuiet: { p99Ms: Math.round(percentile(quiet, 99)) },
      healthzP99BoundMs: healthzBound(quiet),
      healthz: latencyFigures(healthz),
      serverLoopDelay,
      problems: [...result.problems, ...probe.problems],
      serverErrorLogLines: s.errorLines().length,
    }
    report('hostile-round3', figures)
    expect(s.alive(), s.tail()).toBe(true)
    expect(result.problems).toEqual([])
    expect(s.errorLines()).toEqual([])
    expect(healthz.length).toBeGreaterThanOrEqual(200)
    expect(figures.healthz.p99Ms).toBeLessThan(figures.healthzP99BoundMs)
  } finally {
    await s?.stop()
    receiver.server.closeAllConnections()
    await new Promise((r) => receiver.server.close(r))
    await db.drop()
  }
})

it('2,000 concurrent viewer requests: each answered or BUSY at once, /healthz p99 < 100 ms from 200+ samples', {
  timeout: 120_000,
}, async () => {
  const db = await createTestDb()
  let s: ServerProcess | null = null
  try {
    s = await spawnServer({
      name: 'hostile-burst',
      env: { DATABASE_URL: db.url, SHOWRUNNER_TOKENS, INSTANCE_ID: 'drill-hostile-burst', RUNNER: 'on' },
    })
    const defId = await createLogShow(s.url, 'burst', 'x')
    for (let i = 0; i < 20; i++)
      await postGql(s.url, {
        query: `mutation { startRun(definitionId: "${defId}", at: "2030-01-01T00:${String(i).padStart(2, '0')}:00Z") { id } }`,
      })
    const quiet = (await probeInChild(`${s.url}/healthz`, 2000, 10)).latencies
    const body = JSON.stringify({ query: '{ runs(limit: 20) { id status scope definition { slug } } }' })
    // The burst lasts until the prober has its samples (at most 60 s).
    const BURST_MS = 60_000
    // prom-client's event-loop delay figures restart at each scrape: this one starts them with the burst.
    await loopDelay(s.url)
    const cpu0 = cpuSeconds(s.pid)
    const burster = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        BURSTER,
        `${s.url}/graphql`,
        TOKENS.viewer,
        body,
        '2000',
        String(BURST_MS),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    // The clients of a real burst are other machines: on this one, the burster
    // yields the CPU to the server and the prober, so what is measured is the
    // server's loop, not the contest for two cores.
    setPriority(burster.pid as number, 15)
    let out = ''
    let markUnderWay = () => {}
    const underWay = new Promise<void>((resolve) => {
      markUnderWay = resolve
    })
    burster.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes('under way\n')) markUnderWay()
    })
    const burstEnded = once(burster, 'exit')
    // The storm: 2,000 connections opened at once, each with a request, most
    // refused and asked again in step 50 ms later, until every client has had
    // an answer. Probed from its start, bounded loosely: the process answers.
    const storm = await probeInChild(`${s.url}/healthz`, 30_000, 10, 0, Promise.race([underWay, burstEnded]))
    // Then the burst proper: 2,000 requests in flight on open connections.
    const probe = await probeInChild(`${s.url}/healthz`, 3000, 10, 250)
    burster.kill('SIGTERM')
    await burstEnded
    const cpu = cpuSeconds(s.pid) - cpu0
    const serverLoopDelay = await loopDelay(s.url)
    const tally = JSON.parse(out.split('\n').filter(Boolean).pop() ?? '{}') as Record<string, number>
    const healthz = probe.latencies
    const figures = {
      tally,
      serverCpuSeconds: Math.round(cpu * 10) / 10,
      serverLoopDelay,
      healthzQuiet: { p99Ms: Math.round(percentile(quiet, 99)) },
      healthzP99BoundMs: healthzBound(quiet),
      healthz: latencyFigures(healthz),
      storm: latencyFigures(storm.latencies),
      admissionLines: s
        .tail(400)
        .split('\n')
        .filter((l) => l.includes('too many GraphQL requests at once')).length,
    }
    report('hostile-burst', figures)
    expect(s.alive(), s.tail()).toBe(true)
    expect(s.errorLines()).toEqual([])
    expect(probe.problems).toEqual([])
    expect(storm.problems).toEqual([])
    expect(out, 'every client had an answer before the burst ended').toContain('under way\n')
    expect(storm.latencies.length).toBeGreaterThan(0)
    expect(figures.storm.maxMs).toBeLessThan(STORM_MAX_MS)
    // Every answer is the data or BUSY; nothing failed, nothing else.
    for (const key of Object.keys(tally)) expect(key).toMatch(/^(200 ok|503 BUSY|retried on a new socket)$/)
    expect(tally['200 ok'] ?? 0).toBeGreaterThan(0)
    expect(tally['503 BUSY'] ?? 0).toBeGreaterThan(0)
    expect(figures.admissionLines).toBeGreaterThan(0)
    expect(healthz.length).toBeGreaterThanOrEqual(200)
    expect(figures.healthz.p99Ms).toBeLessThan(figures.healthzP99BoundMs)
  } finally {
    await s?.stop()
    await db.drop()
  }
})
