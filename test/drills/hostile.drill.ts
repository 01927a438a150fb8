/**
 * Drill: a minute of hostile traffic against one server process while its
 * runner has runs coming due every second.
 *
 * The server is what `npm start` runs (`node --no-memory-reducer --import tsx src/cli.ts serve`:
 * a real configuration from the environment, the runner on, the default
 * TICK_MS), on a throwaway database. Before the flood, runs are booked with
 * `startRun(at:)` one second apart across the flood. Then, for FLOOD_MS, a
 * bounded hostile client on loopback sends: malformed requests over raw
 * sockets, alias, token and occurrence floods, introspection floods, guessed
 * tokens, scrape floods of /metrics and /readyz, 500 subscriptions on one
 * WebSocket and sockets that never say who they are. Every loop is bounded in
 * count and in time.
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
import { readFileSync } from 'node:fs'
import { setPriority } from 'node:os'
import { createClient } from 'graphql-ws'
import { afterAll, beforeAll, expect, it } from 'vitest'
import WebSocket from 'ws'
import { createTestDb, type TestDb } from '../helpers/db.ts'
import { rawRequest } from '../helpers/rawHttp.ts'
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
/** The /healthz p99 the flood may not push past. */
const HEALTHZ_P99_MS = 100
/** While 2,000 connections open at once, the longest /healthz may take (finding 10 saw 5 s time-outs). */
const STORM_MAX_MS = 1000
/** Each hostile loop sends at most this many requests, however fast the server answers. */
const MAX_PER_LOOP = 3000

let t: TestDb
let server: ServerProcess | null = null
beforeAll(async () => {
  t = await createTestDb()
})
afterAll(async () => {
  await server?.stop()
  await t?.drop()
})

const aliased = (n: number, field: string) =>
  `{ ${Array.from({ length: n }, (_, i) => `a${i}: ${field}`).join(' ')} }`

/** Hostile GraphQL documents, each with what its refusal must say. */
const FLOODS: { name: string; query: string; expect: RegExp }[] = [
  { name: 'aliases', query: aliased(40, 'definitions { id }'), expect: /Aliases limit of 30/ },
  { name: 'aliased health', query: aliased(1400, 'health { ok }'), expect: /Token limit/ },
  { name: 'tokens', query: `{ runs { ${'id '.repeat(5000)} } }`, expect: /Token limit/ },
  {
    name: 'introspection aliases',
    query: aliased(200, '__schema { types { name fields { name type { name kind ofType { name } } } } }'),
    expect: /limit/i,
  },
  {
    name: 'two __schema',
    query: '{ a: __schema { queryType { name } } b: __schema { queryType { name } } }',
    expect: /at most 1 __schema/,
  },
  {
    name: 'introspection nesting',
    query:
      '{ __type(name: "Query") { fields { type { fields { type { fields { type { fields { name } } } } } } } } }',
    expect: /nest at most 3/,
  },
  {
    name: 'occurrences',
    query: `{ definitions { ${Array.from({ length: 300 }, (_, i) => `a${i}: nextOccurrences(count: 1000)`).join(' ')} } }`,
    expect: /limit/i,
  },
  {
    name: 'cost',
    query: '{ runs(limit: 500) { steps { run { steps { run { id } } } } } }',
    expect: /Query cost limit/,
  },
  { name: 'nesting', query: `{ ${'runs { '.repeat(150)}id${' }'.repeat(150)} }`, expect: /nests brackets/ },
]

const MALFORMED = [
  'GET http://a:99999/ HTTP/1.1\r\nHost: x\r\n\r\n',
  `GET /graphql?query={__typename} HTTP/1.1\r\nHost: a:99999\r\nAuthorization: Bearer ${TOKENS.viewer}\r\n\r\n`,
  'GET /graphql HTTP/1.1\r\nHost: [zz\r\n\r\n',
  'POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{"a":',
  'POST /graphql HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
  'GET /healthz HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n',
  '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n',
]

/** Tallies of what each hostile loop saw. */
type Tally = Record<string, number>
const bump = (tally: Tally, key: string) => {
  tally[key] = (tally[key] ?? 0) + 1
}

/**
 * The child's program: GET `url` every `everyMs` for `forMs` (and on, up to
 * four times as long, until it has `minSamples`), then print the latencies as JSON.
 */
const PROBER = `
const [url, forMs, everyMs, minSamples] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4] ?? 0)]
let end = Date.now() + forMs
let wanted = minSamples
// SIGTERM ends the probing after the request in hand, and the figures are printed as usual.
process.on('SIGTERM', () => { end = 0; wanted = 0 })
const latencies = [], problems = []
// One unrecorded request first: a fresh process's first fetch loads and compiles
// the HTTP client and opens its connection (130-330 ms on a loaded 2-core
// machine), which is the prober's start-up, not the server's answer.
try { await (await fetch(url, { signal: AbortSignal.timeout(5000) })).arrayBuffer() } catch {}
while (Date.now() < end || (latencies.length < wanted && Date.now() < end + 3 * forMs)) {
  const t0 = performance.now()
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) })
    await res.arrayBuffer()
    if (res.status !== 200) problems.push('/healthz answered ' + res.status)
  } catch (err) { problems.push('/healthz failed: ' + err.message) }
  latencies.push(performance.now() - t0)
  await new Promise((r) => setTimeout(r, everyMs))
}
process.stdout.write(JSON.stringify({ latencies, problems }))
`

/** A prober's latencies as figures: how many, p50, p99 and the slowest, in whole ms. */
function latencyFigures(latencies: readonly number[]) {
  return {
    samples: latencies.length,
    p50Ms: Math.round(percentile([...latencies], 50)),
    p99Ms: Math.round(percentile([...latencies], 99)),
    maxMs: Math.round(Math.max(0, ...latencies)),
  }
}

/**
 * The /healthz p99 a case may not pass: HEALTHZ_P99_MS, unless the machine
 * alone (no load) already answers slower than half that at p99; then twice
 * what it manages alone, so the drill measures the server, not its neighbours.
 */
function healthzBound(quiet: readonly number[]): number {
  return Math.max(HEALTHZ_P99_MS, 2 * Math.round(percentile([...quiet], 99)))
}

async function probeInChild(
  url: string,
  forMs: number,
  everyMs: number,
  minSamples = 0,
  until?: Promise<unknown>,
): Promise<{ latencies: number[]; problems: string[] }> {
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', PROBER, url, String(forMs), String(everyMs), String(minSamples)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  )
  let out = ''
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString()
  })
  const exited = once(child, 'exit')
  // `until` settling ends the probing early (the prober prints what it has).
  void until?.finally(() => child.kill('SIGTERM'))
  const [code] = (await exited) as [number | null]
  if (code !== 0) return { latencies: [], problems: [`the prober exited with ${code}`] }
  return JSON.parse(out)
}

/** Run `body` until `end` or MAX_PER_LOOP iterations, pausing `pauseMs` between. */
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

async function loop(end: number, pauseMs: number, body: (i: number) => Promise<void>): Promise<number> {
  let i = 0
  while (Date.now() < end && i < MAX_PER_LOOP) {
    await body(i)
    i++
    if (pauseMs > 0) await sleep(pauseMs)
  }
  return i
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

  const tallies: Record<string, Tally> = {
    malformed: {},
    floods: {},
    guesses: {},
    scrapes: {},
    websocket: {},
    idleSockets: {},
  }
  const problems: string[] = []
  const healthz: number[] = []
  const viewer = TOKENS.viewer

  // The /healthz prober is a process of its own, so the hostile client's work in
  // this process does not count as the server's latency.
  const prober = probeInChild(`${s.url}/healthz`, end - Date.now(), 50).then((r) => {
    healthz.push(...r.latencies)
    problems.push(...r.problems)
    return r.latencies.length
  })

  const malformed = loop(end, 20, async (i) => {
    const a = await rawRequest(s.url, MALFORMED[i % MALFORMED.length] as string)
    bump(tallies.malformed as Tally, String(a.status))
    if (a.status === null || a.status >= 500)
      problems.push(`malformed request ${i % MALFORMED.length} → ${a.status}`)
  })

  const floods = [0, 1].map((lane) =>
    loop(end, 20, async (i) => {
      const f = FLOODS[(i * 2 + lane) % FLOODS.length] as (typeof FLOODS)[number]
      const a = await postGql(s.url, { query: f.query }, { token: viewer })
      const message = (a.body?.errors ?? []).map((e) => e.message).join(' ')
      bump(tallies.floods as Tally, `${f.name}:${a.status}`)
      if (a.status !== 400 || !f.expect.test(message)) {
        problems.push(`${f.name} → ${a.status} ${message.slice(0, 200) || a.text.slice(0, 200)}`)
      }
    }),
  )

  const guesses = loop(end, 20, async (i) => {
    const a = await postGql(
      s.url,
      { query: 'query Guess { definitions { id } }' },
      { token: `guess-${i}-xxxxxxxxxxxx` },
    )
    bump(tallies.guesses as Tally, String(a.status))
    if (a.status !== 401) problems.push(`a guessed token → ${a.status}`)
  })

  const scrapes = [0, 1, 2, 3].map((lane) =>
    loop(end, 10, async (i) => {
      const path = (i + lane) % 2 === 0 ? '/metrics' : '/readyz'
      try {
        const res = await fetch(`${s.url}${path}`, { signal: AbortSignal.timeout(5000) })
        await res.arrayBuffer()
        bump(tallies.scrapes as Tally, `${path}:${res.status}`)
      } catch {
        bump(tallies.scrapes as Tally, `${path}:failed`)
      }
    }),
  )

  // 500 subscriptions on one socket: 100 are served, the rest refused with an error, the socket stays up.
  const websocket = (async () => {
    const ws = tallies.websocket as Tally
    const closes: number[] = []
    const client = createClient({
      url: `${s.url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${viewer}` },
      retryAttempts: 0,
      on: { closed: (e) => closes.push((e as CloseEvent).code) },
    })
    const disposers: (() => void)[] = []
    // Fifty at a time, a tenth of a second apart: the burst a misbehaving client sends.
    const outcomes = await Promise.all(
      Array.from(
        { length: 500 },
        (_, i) =>
          new Promise<string>((resolve) => {
            setTimeout(() => subscribeOne(resolve), Math.floor(i / 50) * 100)
          }),
      ),
    )
    function subscribeOne(resolve: (outcome: string) => void) {
      const timer = setTimeout(() => resolve('no answer'), 20_000)
      disposers.push(
        client.subscribe(
          { query: `subscription { runStatus(id: "${runIds[runIds.length - 1]}") { id status } }` },
          {
            next: () => {
              clearTimeout(timer)
              resolve('served')
            },
            error: (err) => {
              clearTimeout(timer)
              const text = JSON.stringify(err)
              resolve(/TOO_MANY_OPERATIONS/.test(text) ? 'refused' : `error ${text.slice(0, 120)}`)
            },
            complete: () => resolve('completed'),
          },
        ),
      )
    }
    for (const o of outcomes) bump(ws, o)
    ws.closedWhileOpen = closes.length
    for (const d of disposers) d()
    await client.dispose()
  })()

  // Sockets that never send connection_init are closed (4408) after the server's init timeout.
  const idle = (async () => {
    const codes = await Promise.all(
      Array.from(
        { length: 20 },
        () =>
          new Promise<string>((resolve) => {
            const socket = new WebSocket(`${s.url.replace(/^http/, 'ws')}/graphql`, 'graphql-transport-ws')
            const timer = setTimeout(() => {
              socket.terminate()
              resolve('still open after 10 s')
            }, 10_000)
            socket.on('close', (code) => {
              clearTimeout(timer)
              resolve(String(code))
            })
            socket.on('error', () => {})
          }),
      ),
    )
    for (const c of codes) bump(tallies.idleSockets as Tally, c)
  })()

  const counts = await Promise.all([prober, malformed, ...floods, guesses, ...scrapes])
  await Promise.all([websocket, idle])

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
  const gqlAfter = await postGql(s.url, { query: '{ definitions { id } }' }, { token: viewer })

  const figures = {
    floodMs: FLOOD_MS,
    tickMs: TICK_MS,
    requests: counts.reduce((a, b) => a + b, 0) + 520,
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

/**
 * The child's program: keep `conc` POSTs of `body` in flight to `url` for at
 * most `forMs`, or until SIGTERM (node:http on keep-alive sockets, lighter
 * than fetch), then print a tally by status and code. It prints the line
 * `under way` once every one of its clients has had a first answer: from
 * then on the `conc` requests are in flight on open connections.
 */
const BURSTER = `
import { Agent, request } from 'node:http'
const [url, token, body, conc, forMs] = [new URL(process.argv[1]), process.argv[2], process.argv[3], Number(process.argv[4]), Number(process.argv[5])]
// Each client keeps its connection, as 2,000 browsers would: node's Agent closes free sockets
// past maxFreeSockets (256 by default), and the clients then reconnect all the time.
const agent = new Agent({ keepAlive: true, maxSockets: conc, maxFreeSockets: conc })
let end = Date.now() + forMs
process.on('SIGTERM', () => { end = 0 })
const tally = {}
const bump = (k) => { tally[k] = (tally[k] ?? 0) + 1 }
const one = () => new Promise((resolve) => {
  const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent, headers: {
    'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: 'Bearer ' + token,
  } }, (res) => {
    let text = ''
    res.setEncoding('utf8')
    res.on('data', (d) => { text += d })
    res.on('end', () => {
      let code = 'ok'
      try { code = JSON.parse(text).errors?.[0]?.extensions?.code ?? 'ok' } catch { code = 'unparsable' }
      bump(res.statusCode + ' ' + code)
      resolve(res.statusCode)
    })
  })
  req.setTimeout(30000, () => req.destroy(new Error('timeout')))
  req.on('error', (err) => {
    // The server closed a keep-alive socket as it was reused (a starved client idled past
    // keepAliveTimeout): asked again on a new one, as node's documentation advises.
    if (req.reusedSocket && err.code === 'ECONNRESET') { bump('retried on a new socket'); resolve(one()); return }
    bump('failed ' + (err.code ?? err.message))
    resolve(0)
  })
  req.end(body)
})
let answeredOnce = 0
async function worker() {
  let first = true
  while (Date.now() < end) {
    const status = await one()
    if (first && ++answeredOnce === conc) process.stdout.write('under way' + String.fromCharCode(10))
    first = false
    // A refused client waits a little before it asks again, as a well-behaved one does (briefly here).
    if (status === 503) await new Promise((r) => setTimeout(r, 50))
  }
}
await Promise.all(Array.from({ length: conc }, worker))
agent.destroy()
process.stdout.write(JSON.stringify(tally))
`

/** The server's own event-loop delay since the last scrape (p99 and max, ms), from /metrics. */
async function loopDelay(url: string): Promise<{ p99Ms: number; maxMs: number }> {
  const text = await fetch(`${url}/metrics`).then((r) => r.text())
  const read = (name: string) => Math.round(1000 * Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1]))
  return { p99Ms: read('nodejs_eventloop_lag_p99_seconds'), maxMs: read('nodejs_eventloop_lag_max_seconds') }
}

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) / 100
}

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
