/**
 * Subscriptions per principal and per instance: a viewer opening 100 per
 * socket on socket after socket is refused past SUBSCRIPTIONS_PER_PRINCIPAL
 * (TOO_MANY_OPERATIONS), over graphql-ws and SSE alike, while another
 * principal subscribes as before; its places come back when its
 * subscriptions end. Past SUBSCRIPTIONS_PER_INSTANCE everybody is refused
 * with BUSY (503 + Retry-After over SSE).
 */
import type { Client } from 'graphql-ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  authHeader,
  type Collected,
  eventually,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

// The inbox answers at once from one read shared by every subscriber, so
// hundreds of them do not queue on the API's pool (runStatus reads per subscriber).
const INBOX = 'subscription { waitingSteps(limit: 1) { id } }'
type Refusal = { message: string; extensions?: Record<string, unknown> }[]

/**
 * Whether `sub` was served (its first event has data) or refused: a refusal
 * arrives as one result carrying the error, then the stream completes (the
 * same over graphql-ws and SSE).
 */
async function outcome(sub: Collected<unknown>): Promise<'served' | Refusal> {
  const first = await sub.until((e) => e.data != null || (e.errors?.length ?? 0) > 0, 20_000)
  if (first.data != null) return 'served'
  await sub.done
  return first.errors as unknown as Refusal
}

/** POST a subscription as SSE and read only the head of the answer (status, Retry-After, first block). */
async function sseHead(s: TestServer, query: string, auth: 'viewer') {
  const controller = new AbortController()
  const res = await fetch(s.graphqlUrl, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      authorization: authHeader(auth) as string,
    },
    body: JSON.stringify({ query }),
    signal: controller.signal,
  })
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  let text = ''
  while (!text.includes('\n\n')) {
    const chunk = await reader.read()
    if (chunk.done) break
    text += new TextDecoder().decode(chunk.value)
  }
  controller.abort()
  return { status: res.status, retryAfter: res.headers.get('retry-after'), text }
}

describe('subscriptions per principal', () => {
  let s: TestServer
  const clients: Client[] = []
  beforeAll(async () => {
    s = await startTestServer()
  })
  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.dispose()))
    await s?.close()
  })

  it('defaults: 200 per principal, 5000 per instance', () => {
    expect(s.config.limits.subscriptionsPerPrincipal).toBe(200)
    expect(s.config.limits.subscriptionsPerInstance).toBe(5000)
  })

  it('a viewer with 100 per socket on 4 sockets gets 200 served; the rest, its SSE stream too, are refused; the operator is not', async () => {
    const closes: number[] = []
    const subs: Collected<unknown>[][] = []
    for (let k = 0; k < 4; k++) {
      // A socket whose every operation was refused is left idle: kept open, so
      // any close seen is the server's, not the lazy client's own (1000).
      const client = wsClient(s, 'viewer', (e) => closes.push(e.code), 60_000)
      clients.push(client)
      subs.push(Array.from({ length: 100 }, () => wsSubscribe(client, INBOX, {})))
    }
    const outcomes = await Promise.all(subs.flat().map(outcome))
    const served = outcomes.filter((o) => o === 'served').length
    const refused = outcomes.filter((o) => o !== 'served') as Refusal[]
    expect(served).toBe(200)
    expect(refused).toHaveLength(200)
    for (const r of refused) {
      expect(r[0]?.extensions?.code).toBe('TOO_MANY_OPERATIONS')
      expect(r[0]?.message).toMatch(/at most 200 open at once.*\(SUBSCRIPTIONS_PER_PRINCIPAL\)/)
    }
    // Refusing an operation closes no socket.
    expect(closes).toEqual([])

    // The same principal over SSE: refused as well, with the same code.
    const sse = await sseHead(s, INBOX, 'viewer')
    expect(sse.text).toContain('TOO_MANY_OPERATIONS')

    // Another principal is unaffected, over both transports.
    const operator = wsClient(s, 'operator')
    clients.push(operator)
    expect(await outcome(wsSubscribe(operator, INBOX, {}))).toBe('served')
    const operatorSse = sseSubscribe(s, INBOX, {}, 'operator')
    expect(await outcome(operatorSse)).toBe('served')
    operatorSse.stop()

    // The viewer's places come back when its subscriptions end: close a socket
    // holding served ones, and a new subscription is served again.
    const holder = subs.findIndex((group) => group.some((sub) => sub.events.some((e) => e.data != null)))
    await clients[holder]?.dispose()
    await eventually(async () => {
      const fresh = wsClient(s, 'viewer')
      clients.push(fresh)
      return (await outcome(wsSubscribe(fresh, INBOX, {}))) === 'served'
    }, 10_000)
  }, 60_000)
})

describe('subscriptions per instance', () => {
  let s: TestServer
  const clients: Client[] = []
  beforeAll(async () => {
    s = await startTestServer({ env: { SUBSCRIPTIONS_PER_INSTANCE: '5' } })
  })
  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.dispose()))
    await s?.close()
  })

  it('past the cap everybody is refused with BUSY (SSE: 503 + Retry-After) until one ends', async () => {
    const viewer = wsClient(s, 'viewer')
    const operator = wsClient(s, 'operator')
    clients.push(viewer, operator)
    const held = [
      ...Array.from({ length: 3 }, () => wsSubscribe(viewer, INBOX, {})),
      ...Array.from({ length: 2 }, () => wsSubscribe(operator, INBOX, {})),
    ]
    expect(await Promise.all(held.map(outcome))).toEqual(Array(5).fill('served'))

    const refused = (await outcome(wsSubscribe(operator, INBOX, {}))) as Refusal
    expect(refused[0]?.extensions?.code).toBe('BUSY')
    expect(refused[0]?.message).toMatch(/SUBSCRIPTIONS_PER_INSTANCE/)
    // Over graphql-ws the refusal carries its code, not yoga's HTTP hints.
    expect(Object.keys(refused[0]?.extensions ?? {})).toEqual(['code'])

    const sse = await sseHead(s, INBOX, 'viewer')
    expect(sse.status).toBe(503)
    expect(sse.retryAfter).toBe('1')
    expect(sse.text).toContain('BUSY')

    held[0]?.stop()
    await eventually(async () => (await outcome(wsSubscribe(operator, INBOX, {}))) === 'served', 10_000)
  }, 60_000)
})
