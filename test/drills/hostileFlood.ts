/**
 * The hostile client of the drill's first case (hostile.drill.ts measures the
 * server meanwhile): malformed requests over raw sockets, alias, token and
 * occurrence floods, introspection floods, guessed tokens, scrape floods of
 * /metrics and /readyz, 500 subscriptions on one WebSocket and sockets that
 * never say who they are. Every loop is bounded in count and in time, and
 * each tallies what it saw; what was not refused as it should be is a problem.
 */
import { createClient } from 'graphql-ws'
import WebSocket from 'ws'
import { rawRequest } from '../helpers/rawHttp.ts'
import { postGql, type ServerProcess, sleep, TOKENS } from './lib.ts'

/** Each hostile loop sends at most this many requests, however fast the server answers. */
const MAX_PER_LOOP = 3000

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
export type Tally = Record<string, number>
const bump = (tally: Tally, key: string) => {
  tally[key] = (tally[key] ?? 0) + 1
}

/** Run `body` until `end` or MAX_PER_LOOP iterations, pausing `pauseMs` between. */
async function loop(end: number, pauseMs: number, body: (i: number) => Promise<void>): Promise<number> {
  let i = 0
  while (Date.now() < end && i < MAX_PER_LOOP) {
    await body(i)
    i++
    if (pauseMs > 0) await sleep(pauseMs)
  }
  return i
}

export interface HostileTraffic {
  /** Requests the bounded loops sent (not the WebSocket's 500 subscriptions and 20 idle sockets). */
  sent: number
  tallies: Record<string, Tally>
  problems: string[]
}

/** Send the hostile traffic to `s` until `end`; the subscriptions ask for the last of `runIds`. */
export async function hostileTraffic(
  s: ServerProcess,
  end: number,
  runIds: string[],
): Promise<HostileTraffic> {
  const tallies: Record<string, Tally> = {
    malformed: {},
    floods: {},
    guesses: {},
    scrapes: {},
    websocket: {},
    idleSockets: {},
  }
  const problems: string[] = []
  const viewer = TOKENS.viewer

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

  const counts = await Promise.all([malformed, ...floods, guesses, ...scrapes])
  await Promise.all([websocket, idle])
  return { sent: counts.reduce((a, b) => a + b, 0), tallies, problems }
}
