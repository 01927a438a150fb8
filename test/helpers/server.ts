/**
 * The real server on an ephemeral port, for the API suites (`test/api.*.test.ts`):
 * its own throwaway database, three tokens (viewer, operator, admin), and
 * clients for every transport: GraphQL over HTTP ({@link TestServer.gql}),
 * graphql-ws ({@link wsClient}) and SSE ({@link sseSubscribe}).
 */
import { type Client, createClient, type FormattedExecutionResult } from 'graphql-ws'
import WebSocket from 'ws'
import { type Config, loadConfig } from '../../src/config.ts'
import { silentLogger } from '../../src/log.ts'
import { type App, type BuildAppDeps, buildApp } from '../../src/server.ts'
import { createTestDb, type TestDb } from './db.ts'

/** One token per role (each at least 16 characters, as config requires). */
export const TOKENS = {
  viewer: 'viewer-token-0123456789abcdef',
  operator: 'operator-token-0123456789abcdef',
  admin: 'admin-token-0123456789abcdef',
} as const
export type TokenName = keyof typeof TOKENS

export const SHOWRUNNER_TOKENS = Object.entries(TOKENS)
  .map(([role, token]) => `${role}:${token}`)
  .join(',')

/** A role's token, a raw token string, or null for "no Authorization header". */
export type Auth = TokenName | { raw: string } | null

export function authHeader(auth: Auth): string | undefined {
  if (auth === null) return undefined
  return `Bearer ${typeof auth === 'string' ? TOKENS[auth] : auth.raw}`
}

export interface GqlResponse<T = Record<string, unknown>> {
  status: number
  headers: Headers
  body: {
    data?: T | null
    errors?: { message: string; path?: (string | number)[]; extensions?: Record<string, unknown> }[]
  }
}

export interface TestServer {
  app: App
  config: Config
  t: TestDb
  /** e.g. http://127.0.0.1:41234 */
  url: string
  graphqlUrl: string
  wsUrl: string
  /** POST a GraphQL document as JSON. */
  gql<T = Record<string, unknown>>(
    query: string,
    opts?: { variables?: Record<string, unknown>; auth?: Auth; headers?: Record<string, string> },
  ): Promise<GqlResponse<T>>
  /** Stop the server and drop its database. */
  close(): Promise<void>
}

export interface StartOptions {
  /** Co-host the runner (TICK_MS 50). @default false */
  runner?: boolean
  /** Extra environment for loadConfig. */
  env?: Record<string, string>
  deps?: BuildAppDeps
}

export async function startTestServer(opts: StartOptions = {}): Promise<TestServer> {
  const t = await createTestDb()
  try {
    const server = await startInstance(
      t,
      { RUNNER: opts.runner ? 'on' : 'off', ...opts.env },
      opts.deps ?? {},
    )
    return {
      ...server,
      async close() {
        await server.app.stop()
        await t.drop()
      },
    }
  } catch (err) {
    await t.drop()
    throw err
  }
}

/**
 * An app on `t`'s database with the suites' settings (`env` over them),
 * started on an ephemeral port; one that fails to start is stopped again.
 */
async function startInstance(
  t: TestDb,
  env: Record<string, string>,
  deps: BuildAppDeps,
): Promise<Omit<TestServer, 'close'>> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: t.url,
    SHOWRUNNER_TOKENS,
    RUNNER: 'off',
    TICK_MS: '50',
    LEASE_MS: '5000',
    STATUS_POLL_MS: '50',
    LOG_LEVEL: 'silent',
    INSTANCE_ID: `test-${process.pid}-${Math.random().toString(16).slice(2, 8)}`,
    ...env,
  })
  const app = buildApp(config, { logger: silentLogger(), ...deps })
  let url: string
  try {
    ;({ url } = await app.start())
  } catch (err) {
    await app.stop().catch(() => {})
    throw err
  }
  const graphqlUrl = `${url}/graphql`
  return { app, config, t, url, graphqlUrl, wsUrl: graphqlUrl.replace(/^http/, 'ws'), gql: gqlAt(graphqlUrl) }
}

/** {@link TestServer.gql} against `graphqlUrl`: admin unless `auth` says otherwise. */
function gqlAt(graphqlUrl: string): TestServer['gql'] {
  return async (query, o = {}) => {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json, application/json',
      ...o.headers,
    }
    const auth = authHeader(o.auth === undefined ? 'admin' : o.auth)
    if (auth) headers.authorization = auth
    const res = await fetch(graphqlUrl, {
      method: 'POST',
      headers,
      body: JSON.stringify({ query, variables: o.variables }),
    })
    const text = await res.text()
    let body: GqlResponse['body']
    try {
      body = JSON.parse(text)
    } catch {
      throw new Error(`not JSON (HTTP ${res.status}): ${text.slice(0, 300)}`)
    }
    return { status: res.status, headers: res.headers, body } as GqlResponse<never>
  }
}

/**
 * Another instance on `first`'s database (RUNNER=off unless `env` says
 * otherwise): its own process state (caches, pollers, admission), the same
 * rows. Closing it stops the instance and leaves the database to `first`.
 */
export async function startSecondInstance(
  first: TestServer,
  opts: { env?: Record<string, string>; deps?: BuildAppDeps } = {},
): Promise<TestServer> {
  const server = await startInstance(first.t, { ...opts.env }, { ...opts.deps, migrate: false })
  return { ...server, close: () => server.app.stop() }
}

/** A graphql-ws client for `server`, authenticating as `auth`; no retries, so refusals surface. */
export function wsClient(
  server: TestServer,
  auth: Auth,
  onClosed?: (event: { code: number; reason: string }) => void,
  /**
   * How long the (lazy) client keeps a socket open once none of its
   * operations is left, before closing it itself (1000). @default 0
   */
  lazyCloseTimeout = 0,
): Client {
  const authorization = authHeader(auth)
  return createClient({
    url: server.wsUrl,
    webSocketImpl: WebSocket,
    connectionParams: authorization ? { authorization } : {},
    retryAttempts: 0,
    lazy: true,
    lazyCloseTimeout,
    on: onClosed
      ? {
          closed: (e) => onClosed({ code: (e as CloseEvent).code, reason: String((e as CloseEvent).reason) }),
        }
      : undefined,
  })
}

/** Everything one subscription delivered, and how it ended. */
export interface Collected<T> {
  events: FormattedExecutionResult<T, unknown>[]
  /** Resolves when the subscription completed; rejects with what the transport reported on error. */
  done: Promise<void>
  /** Resolves with the first event matching `pred` (already received or still to come). */
  until(
    pred: (e: FormattedExecutionResult<T, unknown>) => boolean,
    timeoutMs?: number,
  ): Promise<FormattedExecutionResult<T, unknown>>
  stop(): void
}

function collector<T>(): {
  collected: Omit<Collected<T>, 'done' | 'stop'>
  push(e: FormattedExecutionResult<T, unknown>): void
} {
  const events: FormattedExecutionResult<T, unknown>[] = []
  const waiters: {
    pred: (e: FormattedExecutionResult<T, unknown>) => boolean
    resolve: (e: FormattedExecutionResult<T, unknown>) => void
  }[] = []
  return {
    collected: {
      events,
      until(pred, timeoutMs = 10_000) {
        const hit = events.find(pred)
        if (hit) return Promise.resolve(hit)
        return new Promise((resolve, reject) => {
          const timer = setTimeout(
            () =>
              reject(new Error(`no matching event within ${timeoutMs} ms; got ${JSON.stringify(events)}`)),
            timeoutMs,
          )
          waiters.push({
            pred,
            resolve: (e) => {
              clearTimeout(timer)
              resolve(e)
            },
          })
        })
      },
    },
    push(e) {
      events.push(e)
      for (const w of [...waiters]) {
        if (w.pred(e)) {
          waiters.splice(waiters.indexOf(w), 1)
          w.resolve(e)
        }
      }
    },
  }
}

/** Subscribe over graphql-ws and collect every event. */
export function wsSubscribe<T = Record<string, unknown>>(
  client: Client,
  query: string,
  variables?: Record<string, unknown>,
): Collected<T> {
  const c = collector<T>()
  let unsubscribe = () => {}
  const done = new Promise<void>((resolve, reject) => {
    unsubscribe = client.subscribe<T>(
      { query, variables },
      { next: (e) => c.push(e), error: (err) => reject(err), complete: () => resolve() },
    )
  })
  done.catch(() => {})
  return { ...c.collected, done, stop: () => unsubscribe() }
}

/**
 * Subscribe over Server-Sent Events the way a browser's fetch would: POST with
 * `Accept: text/event-stream`, then parse `event:`/`data:` blocks.
 */
export function sseSubscribe<T = Record<string, unknown>>(
  server: TestServer,
  query: string,
  variables: Record<string, unknown> | undefined,
  auth: Auth = 'viewer',
): Collected<T> & { status: Promise<number> } {
  const c = collector<T>()
  const controller = new AbortController()
  let resolveStatus: (s: number) => void = () => {}
  const status = new Promise<number>((r) => {
    resolveStatus = r
  })
  const done = (async () => {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'text/event-stream',
    }
    const a = authHeader(auth)
    if (a) headers.authorization = a
    const res = await fetch(server.graphqlUrl, {
      method: 'POST',
      headers,
      body: JSON.stringify({ query, variables }),
      signal: controller.signal,
    })
    resolveStatus(res.status)
    if (!res.body) return
    const decoder = new TextDecoder()
    let buffer = ''
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true })
      let idx = buffer.indexOf('\n\n')
      while (idx >= 0) {
        const block = buffer.slice(0, idx)
        buffer = buffer.slice(idx + 2)
        idx = buffer.indexOf('\n\n')
        let event = 'message'
        const data: string[] = []
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim()
          else if (line.startsWith('data:')) data.push(line.slice(5).trimStart())
        }
        if (event === 'complete') return
        if (data.length > 0 && data.join('') !== '') c.push(JSON.parse(data.join('\n')))
      }
    }
  })()
  done.catch(() => {})
  return { ...c.collected, done, status, stop: () => controller.abort() }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Poll `fn` until it answers truthy (or time runs out). */
type Truthy<T> = Exclude<T, null | undefined | false | 0 | ''>

export async function eventually<T>(
  fn: () => Promise<T> | T,
  timeoutMs = 10_000,
  everyMs = 25,
): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await fn()
      if (v) return v as Truthy<T>
      last = v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms (last: ${String(last)})`)
    await sleep(everyMs)
  }
}

/** The program the admin-session tests use: log → cue → wait 1 s → ending phase log. */
export const SESSION_PROGRAM = {
  phases: [
    {
      name: 'opening',
      steps: [
        { kind: 'core.log', params: { message: 'doors open for {{definition.title}}' } },
        { kind: 'core.cue', params: { prompt: 'Start the show?' } },
        { kind: 'core.wait', params: { seconds: 1 } },
      ],
    },
    {
      name: 'wrap-up',
      ending: true,
      steps: [{ kind: 'core.log', params: { message: 'that was the show' } }],
    },
  ],
}

/** Every error message and code in a response, and a check that none leaks internals. */
export function leakProblems(body: GqlResponse['body'] | FormattedExecutionResult): string[] {
  const problems: string[] = []
  for (const e of body.errors ?? []) {
    const text = JSON.stringify(e)
    if (
      /\bSELECT\b|\bINSERT INTO\b|\bDELETE FROM\b|\bUPDATE \w+ SET\b|\bsql\b|\bER_[A-Z_]{3,}/i.test(e.message)
    )
      problems.push(`SQL in: ${e.message}`)
    if (/\bat .+:\d+:\d+|node_modules|\.ts:\d+/.test(text)) problems.push(`stack frame in: ${text}`)
    if ('stack' in (e.extensions ?? {}) || 'originalError' in (e.extensions ?? {}))
      problems.push(`internals in: ${text}`)
  }
  return problems
}

/**
 * Wait until the co-hosted runner has given run `runId`'s claim back (a
 * parked cue's give-back), then answer how many runs answers have handed
 * over to it so far: a cue answered from here on is handed over
 * (src/runner/handOff.ts), not woken for the next claim.
 */
export async function handOversOnceGivenBack(s: TestServer, runId: number | string): Promise<() => number> {
  await eventually(async () => {
    const [row] = await s.t.db.query<{ c: string | null }>(
      'SELECT claimed_by AS c FROM event_runs WHERE id = ?',
      [runId],
    )
    return row?.c === null
  })
  const lane = s.app.runner?.lane
  return () => lane?.adoptedRuns ?? 0
}
