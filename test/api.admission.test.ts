/**
 * Admission of GraphQL work (src/api/admission.ts): at most
 * GRAPHQL_MAX_IN_FLIGHT requests are worked on at once, GRAPHQL_MAX_QUEUED
 * more wait in arrival order, the rest are answered BUSY (503, Retry-After) at
 * once before any work; /healthz and open streams hold no slot. Counts, not
 * wall time.
 */
import { request } from 'node:http'
import { connect } from 'node:net'
import type { ExecutionResult } from 'graphql'
import type { Client } from 'graphql-ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  ADMISSION_BUSY_MESSAGE,
  Admission,
  MAX_RETRY_AFTER_SECONDS,
  type Release,
} from '../src/api/admission.ts'
import { ConfigError, loadConfig } from '../src/config.ts'
import { wholeResponseLength } from './helpers/rawHttp.ts'
import {
  eventually,
  type GqlResponse,
  sleep,
  sseSubscribe,
  startTestServer,
  type TestServer,
  TOKENS,
  wsClient,
} from './helpers/server.ts'

/** One query over a graphql-ws client: its one result (data or errors). */
function wsQuery(client: Client, query: string): Promise<ExecutionResult> {
  return new Promise((resolve, reject) => {
    let result: ExecutionResult | undefined
    client.subscribe(
      { query },
      {
        next: (r) => {
          result = r as ExecutionResult
        },
        error: reject,
        complete: () => (result ? resolve(result) : reject(new Error('completed without a result'))),
      },
    )
  })
}

describe('the admission counter', () => {
  it('runs maxInFlight at once, queues maxQueued in arrival order, refuses the rest', () => {
    const a = new Admission({ maxInFlight: 2, maxQueued: 3 })
    const started: number[] = []
    const refused: number[] = []
    const releases = new Map<number, Release>()
    for (let i = 0; i < 7; i++)
      a.enter(
        (release) => {
          started.push(i)
          releases.set(i, release)
        },
        () => refused.push(i),
      )
    expect(started).toEqual([0, 1])
    expect(refused).toEqual([5, 6])
    expect(a.stats()).toMatchObject({ inFlight: 2, queued: 3, admitted: 2, refusedFull: 2 })
    // A release frees one slot once, however often it is called.
    releases.get(0)?.()
    releases.get(0)?.()
    expect(started).toEqual([0, 1, 2])
    expect(a.stats()).toMatchObject({ inFlight: 2, queued: 2 })
    for (const i of [1, 2, 3, 4]) releases.get(i)?.()
    expect(started).toEqual([0, 1, 2, 3, 4])
    expect(a.stats()).toMatchObject({ inFlight: 0, queued: 0, admitted: 5, waited: 3, peakInFlight: 2 })
  })

  it('a waiter whose client left is skipped; one that waited maxWaitMs is refused', async () => {
    const a = new Admission({ maxInFlight: 1, maxQueued: 5, maxWaitMs: 30 })
    const log: string[] = []
    let release0: Release = () => {}
    a.enter(
      (r) => {
        release0 = r
      },
      () => log.push('refused 0'),
    )
    const leave1 = a.enter(
      () => log.push('ran 1'),
      () => log.push('refused 1'),
    )
    a.enter(
      () => log.push('ran 2'),
      () => log.push('refused 2'),
    )
    leave1()
    expect(a.stats()).toMatchObject({ queued: 1, abandoned: 1 })
    await sleep(80)
    expect(log).toEqual(['refused 2'])
    expect(a.stats()).toMatchObject({ queued: 0, refusedWaited: 1, inFlight: 1 })
    release0()
    a.enter(
      () => log.push('ran 3'),
      () => log.push('refused 3'),
    )
    expect(log).toEqual(['refused 2', 'ran 3'])
  })

  it("Retry-After is 1 for a lone refusal; a storm's is spread over the seconds it takes to serve, at most 10", () => {
    let t = 50_000
    let draw = 0.999
    const a = new Admission(
      { maxInFlight: 2, maxQueued: 3 },
      () => t,
      () => draw,
    )
    for (let i = 0; i < 5; i++)
      a.enter(
        () => {},
        () => {},
      )
    const refuse = (n: number) => {
      for (let i = 0; i < n; i++)
        a.enter(
          () => expect.unreachable(),
          () => {},
        )
    }
    refuse(1)
    expect(a.retryAfterSeconds()).toBe(1)
    // 25 refused, 5 served a second (two slots and three places in the queue): up to 5 s apart.
    refuse(24)
    expect(a.retryAfterSeconds()).toBe(5)
    draw = 0
    expect(a.retryAfterSeconds()).toBe(1)
    draw = 0.5
    expect(a.retryAfterSeconds()).toBe(3)
    // Thousands refused: never sent away for more than 10 s.
    refuse(5000)
    draw = 0.999
    expect(a.retryAfterSeconds()).toBe(MAX_RETRY_AFTER_SECONDS)
    // The refusals of a second or two ago count; older ones do not.
    t += 1500
    expect(a.retryAfterSeconds()).toBe(MAX_RETRY_AFTER_SECONDS)
    t += 1500
    expect(a.retryAfterSeconds()).toBe(1)

    // Completions set the pace when they outrun one queue's worth a second.
    const fast = new Admission(
      { maxInFlight: 1, maxQueued: 0 },
      () => t,
      () => 0.999,
    )
    for (let i = 0; i < 40; i++)
      fast.enter(
        (release) => release(),
        () => expect.unreachable(),
      )
    fast.enter(
      () => {},
      () => expect.unreachable(),
    )
    for (let i = 0; i < 100; i++)
      fast.enter(
        () => expect.unreachable(),
        () => {},
      )
    // 100 refused at 20 served a second (40 over the two-second span): 5 s, not the 10 one slot alone would give.
    expect(fast.retryAfterSeconds()).toBe(5)
  })

  it('the limits are settings validated with clear messages', () => {
    expect(loadConfig({})).toMatchObject({ graphqlMaxInFlight: 32, graphqlMaxQueued: 256 })
    try {
      loadConfig({ GRAPHQL_MAX_IN_FLIGHT: '0', GRAPHQL_MAX_QUEUED: 'many' })
      expect.unreachable()
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError)
      expect((err as ConfigError).problems).toEqual([
        "GRAPHQL_MAX_IN_FLIGHT must be a whole number of requests from 1 to 10000 (got '0')",
        "GRAPHQL_MAX_QUEUED must be a whole number of waiting requests from 0 to 1000000 (got 'many')",
      ])
    }
  })
})

/** POST `query` as a viewer on a new connection, closed after the answer. */
function gqlOnItsOwnConnection(s: TestServer, query: string): Promise<GqlResponse> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ query })
    const req = request(
      s.graphqlUrl,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          accept: 'application/graphql-response+json',
          authorization: `Bearer ${TOKENS.viewer}`,
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d: string) => {
          text += d
        })
        res.on('end', () => {
          const headers = new Headers()
          for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers.set(k, v)
          resolve({ status: res.statusCode ?? 0, headers, body: JSON.parse(text) } as GqlResponse)
        })
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

/**
 * One keep-alive connection, sending requests one after another: each
 * `send` answers the status of its response and how long it took.
 */
function keepAliveConnection(url: string) {
  const { hostname, port } = new URL(url)
  const socket = connect(Number(port), hostname)
  let buffered = ''
  let waiting: ((status: number) => void) | null = null
  socket.setEncoding('latin1')
  socket.on('data', (d: string) => {
    buffered += d
    const whole = wholeResponseLength(buffered)
    if (whole === null) return
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(buffered)?.[1])
    buffered = buffered.slice(whole)
    waiting?.(status)
  })
  return {
    send(query: string): Promise<{ status: number; ms: number }> {
      const body = JSON.stringify({ query })
      const t0 = performance.now()
      return new Promise((resolve) => {
        waiting = (status) => resolve({ status, ms: performance.now() - t0 })
        socket.write(
          `POST /graphql HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\n` +
            `authorization: Bearer ${TOKENS.viewer}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        )
      })
    },
    close: () => socket.destroy(),
  }
}

describe('a server with two slots and a queue of three', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({
      env: { GRAPHQL_MAX_IN_FLIGHT: '2', GRAPHQL_MAX_QUEUED: '3', DB_POOL_SIZE: '2', DB_QUEUE_LIMIT: '1000' },
    })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('ten at once while the database is held: two worked on, three wait, five BUSY at once; all five taken answer', async () => {
    // Both API connections held for a second: the two in flight wait on the pool.
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(1)').catch((e: unknown) => e))
    await sleep(50)
    const before = s.app.admission.stats()
    const statementsBefore = s.app.db.stats.statements
    const answers: Promise<GqlResponse>[] = []
    for (let i = 0; i < 10; i++) {
      // Each on a connection of its own: a refused connection is not read again for a second.
      answers.push(gqlOnItsOwnConnection(s, '{ runs(limit: 5) { id } }'))
      // In order of arrival: each is received before the next is sent.
      await eventually(async () => {
        const st = s.app.admission.stats()
        return (
          st.admitted + st.queued + st.refusedFull - before.admitted - before.refusedFull === i + 1 || null
        )
      }, 5000)
    }
    const mid = s.app.admission.stats()
    expect(mid.inFlight).toBe(2)
    expect(mid.queued).toBe(3)
    expect(mid.refusedFull - before.refusedFull).toBe(5)
    // /healthz is not GraphQL work: answered while every slot and the queue are taken.
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200)
    const done = await Promise.all(answers)
    const busy = done.filter((a) => a.status === 503)
    expect(busy).toHaveLength(5)
    for (const a of busy) {
      expect(a.headers.get('retry-after')).toBe('1')
      expect(a.headers.get('content-type')).toMatch(/^application\/graphql-response\+json/)
      expect(a.body).toEqual({ errors: [{ message: ADMISSION_BUSY_MESSAGE, extensions: { code: 'BUSY' } }] })
    }
    // The five refused ran no statement: the five taken ran theirs.
    expect(done.filter((a) => a.status === 200 && a.body.errors === undefined)).toHaveLength(5)
    await Promise.all(held)
    const after = s.app.admission.stats()
    expect(after.admitted - before.admitted).toBe(5)
    expect(after.waited - before.waited).toBe(3)
    expect(after.peakInFlight).toBe(2)
    expect(after.inFlight).toBe(0)
    expect(s.app.db.stats.statements - statementsBefore).toBeGreaterThan(0)
  })

  it('a connection answered BUSY is not read again before its Retry-After; other connections are', async () => {
    // Both API connections held: two requests in flight, three waiting, so the next is BUSY.
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(2)').catch((e: unknown) => e))
    await sleep(50)
    const taken = Array.from({ length: 5 }, () => gqlOnItsOwnConnection(s, '{ runs(limit: 1) { id } }'))
    await eventually(async () => (s.app.admission.stats().queued === 3 ? true : null), 5000)
    const eager = keepAliveConnection(s.url)
    try {
      const first = await eager.send('{ runs(limit: 1) { id } }')
      expect(first.status).toBe(503)
      // Asked again at once on the same connection: read only once its second is up.
      const again = eager.send('{ runs(limit: 1) { id } }')
      const t0 = performance.now()
      expect((await fetch(`${s.url}/healthz`)).status).toBe(200)
      expect(await gqlOnItsOwnConnection(s, '{ runs(limit: 1) { id } }')).toMatchObject({ status: 503 })
      const healthzAndOthersMs = performance.now() - t0
      const second = await again
      expect(second.ms).toBeGreaterThanOrEqual(900)
      expect(healthzAndOthersMs).toBeLessThan(second.ms)
    } finally {
      eager.close()
      await Promise.all([...taken, ...held])
    }
  })

  it('open Server-Sent Events streams hold no slot: three open, then a query is answered at once', async () => {
    const streams = Array.from({ length: 3 }, () =>
      sseSubscribe(s, 'subscription { runChanges { run { id } } }', undefined, 'viewer'),
    )
    try {
      for (const st of streams) expect(await st.status).toBe(200)
      await eventually(async () => s.app.admission.stats().inFlight === 0 || null, 5000)
      const a = await s.gql('{ viewer { role } }', { auth: 'viewer' })
      expect(a.status).toBe(200)
      expect(a.body.data).toEqual({ viewer: { role: 'VIEWER' } })
    } finally {
      for (const st of streams) st.stop()
    }
  })

  it('WebSocket queries share the slots: ten on one socket while the database is held, two worked on, three wait, five BUSY with retryAfterSeconds', async () => {
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(1)').catch((e: unknown) => e))
    await sleep(50)
    const before = s.app.admission.stats()
    const client = wsClient(s, 'viewer')
    try {
      const answers = Array.from({ length: 10 }, () => wsQuery(client, '{ runs(limit: 5) { id } }'))
      await eventually(async () => {
        const st = s.app.admission.stats()
        return st.admitted + st.queued + st.refusedFull - before.admitted - before.refusedFull === 10 || null
      }, 5000)
      const mid = s.app.admission.stats()
      expect(mid.inFlight).toBe(2)
      expect(mid.queued).toBe(3)
      expect(mid.refusedFull - before.refusedFull).toBe(5)
      // An HTTP request meanwhile finds the same slots and queue taken.
      expect((await gqlOnItsOwnConnection(s, '{ runs(limit: 1) { id } }')).status).toBe(503)
      const done = await Promise.all(answers)
      const busy = done.filter((a) => a.errors !== undefined)
      expect(busy).toHaveLength(5)
      for (const a of busy) {
        expect(a.data).toBeUndefined()
        expect(a.errors?.map((e) => ({ message: e.message, extensions: e.extensions }))).toEqual([
          {
            message: ADMISSION_BUSY_MESSAGE,
            extensions: { code: 'BUSY', retryAfterSeconds: expect.any(Number) },
          },
        ])
        expect(a.errors?.[0]?.extensions?.retryAfterSeconds).toBeGreaterThanOrEqual(1)
      }
      expect(done.filter((a) => Array.isArray((a.data as { runs?: unknown })?.runs))).toHaveLength(5)
      await Promise.all(held)
      const after = s.app.admission.stats()
      expect(after.admitted - before.admitted).toBe(5)
      expect(after.waited - before.waited).toBe(3)
      expect(after.inFlight).toBe(0)
    } finally {
      await client.dispose()
    }
  })

  it('WebSocket queries waiting for a slot leave the queue when their socket closes', async () => {
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(0.6)').catch((e: unknown) => e))
    await sleep(50)
    const before = s.app.admission.stats()
    const inFlight = [s.gql('{ runs(limit: 1) { id } }'), s.gql('{ runs(limit: 1) { id } }')]
    await eventually(async () => s.app.admission.stats().inFlight === 2 || null, 5000)
    const client = wsClient(s, 'viewer')
    const waiting = Array.from({ length: 3 }, () =>
      wsQuery(client, '{ runs(limit: 1) { id } }').catch(() => 'closed'),
    )
    await eventually(async () => s.app.admission.stats().queued === 3 || null, 5000)
    await client.dispose()
    await eventually(async () => s.app.admission.stats().abandoned - before.abandoned === 3 || null, 5000)
    expect(s.app.admission.stats().queued).toBe(0)
    await Promise.all([...inFlight, ...held, ...waiting])
    // Nothing of theirs was worked on: only the two HTTP requests were admitted.
    expect(s.app.admission.stats().admitted - before.admitted).toBe(2)
  })

  it('a waiting request whose client goes away leaves the queue', async () => {
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(0.6)').catch((e: unknown) => e))
    await sleep(50)
    const before = s.app.admission.stats()
    const inFlight = [s.gql('{ runs(limit: 1) { id } }'), s.gql('{ runs(limit: 1) { id } }')]
    await eventually(async () => s.app.admission.stats().inFlight === 2 || null, 5000)
    const controller = new AbortController()
    const gone = fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer x' },
      body: JSON.stringify({ query: '{ runs { id } }' }),
      signal: controller.signal,
    }).catch(() => 'aborted')
    await eventually(async () => s.app.admission.stats().queued === 1 || null, 5000)
    controller.abort()
    expect(await gone).toBe('aborted')
    await eventually(async () => s.app.admission.stats().abandoned - before.abandoned === 1 || null, 5000)
    expect(s.app.admission.stats().queued).toBe(0)
    await Promise.all([...inFlight, ...held])
  })

  it('a client that hangs up on a request being worked on does not free its slot before the work ends', async () => {
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(0.6)').catch((e: unknown) => e))
    await sleep(50)
    const controllers = [new AbortController(), new AbortController()]
    const hungUp = controllers.map((c) =>
      fetch(s.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKENS.viewer}` },
        body: JSON.stringify({ query: '{ runs(limit: 1) { id } }' }),
        signal: c.signal,
      }).catch(() => 'aborted'),
    )
    await eventually(async () => s.app.admission.stats().inFlight === 2 || null, 5000)
    for (const c of controllers) c.abort()
    expect(await Promise.all(hungUp)).toEqual(['aborted', 'aborted'])
    await sleep(100)
    // Still worked on: the slots are still taken, the next request waits.
    expect(s.app.admission.stats().inFlight).toBe(2)
    await Promise.all(held)
    await eventually(async () => s.app.admission.stats().inFlight === 0 || null, 5000)
  })

  it('a storm of refusals is told to come back over several seconds, not all in the same one', async () => {
    const held = Array.from({ length: 2 }, () => s.app.db.query('SELECT SLEEP(1)').catch((e: unknown) => e))
    await sleep(50)
    const done = await Promise.all(
      Array.from({ length: 40 }, () => gqlOnItsOwnConnection(s, '{ runs(limit: 1) { id } }')),
    )
    const waits = done.filter((a) => a.status === 503).map((a) => Number(a.headers.get('retry-after')))
    // Two worked on and three queued at most; the other 35 refused, each with a whole number of seconds.
    expect(waits.length).toBeGreaterThanOrEqual(35)
    for (const w of waits) {
      expect(Number.isInteger(w)).toBe(true)
      expect(w).toBeGreaterThanOrEqual(1)
      expect(w).toBeLessThanOrEqual(MAX_RETRY_AFTER_SECONDS)
    }
    // The i-th refusal's wait is drawn from 1 to ceil(i / 5): all 35 at 1 has odds below 1 in 10^20.
    expect(Math.max(...waits)).toBeGreaterThan(1)
    await Promise.all(held)
  })
})
