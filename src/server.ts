/**
 * The server as a function: `buildApp(config) → { start, stop }`.
 *
 * One port serves GraphQL over HTTP (GET/POST, GraphQL-over-HTTP compliant),
 * Server-Sent Events (`Accept: text/event-stream`) and GraphiQL (browsers) via
 * yoga at `/graphql`, GraphQL over WebSocket (`graphql-ws`) on the same path,
 * and the unauthenticated probes `/healthz`, `/readyz` and `/metrics` (counts
 * only). The runner is co-hosted unless RUNNER=off. `main` (src/cli.ts) only
 * wires the environment to this.
 *
 * stop() is ordered so nothing is cut mid-way: stop accepting connections →
 * stop the runner (the current step finishes, claims are released) → complete
 * every subscription (SSE streams end, WebSocket sockets close with 1001) →
 * drain HTTP connections → close the database pool.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { maxAliasesPlugin } from '@escape.tech/graphql-armor-max-aliases'
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth'
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens'
import { GraphQLError, type ValidationContext } from 'graphql'
import {
  createGraphQLError,
  createYoga,
  type YogaInitialContext,
  type YogaServerInstance,
} from 'graphql-yoga'
import { CONSOLE_PATHS, createConsoleHandler } from '../console/serve.ts'
import { schema } from '../schema/index.ts'
import { createDb, type Db } from '../sql/db.ts'
import { countDegraded } from '../sql/eventRuns/index.ts'
import { waitingSummary } from '../sql/eventSteps/index.ts'
import { migrate, pendingMigrations } from '../sql/migrate.ts'
import { ChangeSignal, useChangeSignalAfterMutations } from './api/changeSignal.ts'
import { type ApiContext, type ApiServices, createApiContext } from './api/context.ts'
import { useDocumentNestingLimit } from './api/documentLimits.ts'
import { API_CODES, createMaskError, useValidationErrorCodes } from './api/errors.ts'
import { GRAPHIQL_ASSET_PATH, renderSelfHostedGraphiQL, serveGraphiqlAsset } from './api/graphiql.ts'
import { CSRF_HEADER, useAuthGate, useCsrfPrevention } from './api/httpGuards.ts'
import { InboxFeed } from './api/inboxFeed.ts'
import { useQueryJit } from './api/jit.ts'
import { useQueryBudget } from './api/queryBudget.ts'
import { requestTarget } from './api/requestTarget.ts'
import { RunChangeFeed } from './api/runChangeFeed.ts'
import { StatusPoller } from './api/statusPoller.ts'
import { attachGraphqlWs, WS_PRINCIPAL, type WsTransport } from './api/ws.ts'
import { authenticate, type Principal, type TokenEntry, tokenActor } from './auth.ts'
import { type Config, generateToken } from './config.ts'
import { createLogger, type Logger } from './log.ts'
import { createMetrics, type Metrics } from './metrics.ts'
import { runCountsFor } from './runCounts.ts'
import { type Clock, systemClock } from './runner/clock.ts'

import { Runner } from './runner/runner.ts'
import { createDefaultRegistry, type StepRegistry } from './runner/steps/registry.ts'
import { createSnapshot } from './snapshot.ts'

export const GRAPHQL_PATH = '/graphql'
/** How old the figures behind `/readyz` and `/metrics` may be, in milliseconds. */
export const PROBE_SNAPSHOT_MS = 2000
/**
 * graphql-armor throws its rejection out of validation by default (so it reaches
 * clients as an HTTP 200 "Syntax Error"). Report it as the validation error it
 * is instead: HTTP 400, code GRAPHQL_VALIDATION_FAILED, with the variable that
 * raises the limit named.
 */
const armorReports = (variable: string) => ({
  propagateOnRejection: false,
  onReject: [
    (ctx: ValidationContext | null, err: GraphQLError) =>
      ctx?.reportError(
        new GraphQLError(`${err.message.replace(/^Syntax Error:\s*/, '')} (${variable})`, {
          extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED },
        }),
      ),
  ],
})

/**
 * The token limit trips inside the parser, where there is no validation
 * context to report to: it throws the same validation error itself, which also
 * stops the parse at the first token past the limit.
 */
const tokenLimitReports = (limit: number) => ({
  propagateOnRejection: true,
  onReject: [
    () => {
      throw createGraphQLError(
        `Token limit of ${limit} exceeded: the document is too long (MAX_QUERY_TOKENS).`,
        { extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED, http: { status: 400 } } },
      )
    },
  ],
})

/** Optional collaborators of {@link buildApp}; everything has a production default. */
export interface BuildAppDeps {
  /** A pool to use instead of opening one on `config.databaseUrl`; the caller keeps ownership (stop() leaves it open). */
  db?: Db
  /**
   * The runner's pool, likewise the caller's. @default a pool of
   * RUNNER_DB_POOL_SIZE on `config.databaseUrl`; `db` when only that is given
   * without a URL
   */
  runnerDb?: Db
  /** @default createLogger({ level: config.logLevel, instance: config.instanceId }) */
  logger?: Logger
  /** Step kinds the runner and program validation know. @default createDefaultRegistry() */
  registry?: StepRegistry
  /** @default systemClock */
  clock?: Clock
  /** @default createMetrics({ log: logger, now: the clock }) */
  metrics?: Metrics
  /** Apply pending migrations in start(). @default true */
  migrate?: boolean
  /** Where the generated admin token is printed (once) when no tokens are configured. @default process.stdout */
  out?: { write(text: string): unknown }
  /**
   * The admin token to use when no tokens are configured, and the file it is
   * kept in (said when it is printed). @default a fresh token for this process
   */
  adminToken?: { token: string; file: string }
}

export interface StartedApp {
  /** Base URL, e.g. `http://127.0.0.1:4000`; GraphQL is at `${url}/graphql`. */
  url: string
  host: string
  port: number
}

export interface App {
  /** Migrate (unless disabled), listen, start the runner; answers where it listens. */
  start(): Promise<StartedApp>
  /** Graceful, idempotent shutdown (see the module comment for the order). */
  stop(): Promise<void>
  /** The co-hosted runner; null with RUNNER=off. */
  readonly runner: Runner | null
  /** The API's pool. */
  readonly db: Db
  /** The runner's own pool (the API's when no DATABASE_URL was given); null with RUNNER=off. */
  readonly runnerDb: Db | null
  // biome-ignore lint/suspicious/noExplicitAny: node:http server context
  readonly yoga: YogaServerInstance<any, ApiContext>
  readonly registry: StepRegistry
  readonly metrics: Metrics
  readonly poller: StatusPoller
  /** The pollers behind `runChanges` and `waitingSteps`. */
  readonly runChanges: RunChangeFeed
  readonly inbox: InboxFeed
  /** The admin token generated because none was configured (printed once by start()); null otherwise. */
  readonly generatedToken: string | null
}

type Route = '/graphql' | '/graphiql' | '/healthz' | '/readyz' | '/metrics' | 'console' | 'other'

function routeOf(pathname: string): Route {
  if (pathname === GRAPHQL_PATH || pathname === `${GRAPHQL_PATH}/`) return '/graphql'
  if (pathname === '/healthz' || pathname === '/readyz' || pathname === '/metrics') return pathname
  if (pathname.startsWith(GRAPHIQL_ASSET_PATH)) return '/graphiql'
  if (CONSOLE_PATHS.has(pathname)) return 'console'
  return 'other'
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  })
  res.end(text)
}

function urlHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1'
  if (host === '::') return '[::1]'
  return host.includes(':') ? `[${host}]` : host
}

/**
 * Build the whole server (HTTP + WebSocket + runner) from a validated config.
 * Nothing listens and nothing touches the database until start().
 */
export function buildApp(config: Config, deps: BuildAppDeps = {}): App {
  const logger = deps.logger ?? createLogger({ level: config.logLevel, instance: config.instanceId })
  if (!deps.db && !config.databaseUrl) {
    throw new Error(
      'buildApp needs a database: set DATABASE_URL (mysql://user:pass@host:3306/db) or pass deps.db.',
    )
  }
  // Two pools: the API's, whose wait queue is bounded so a flood answers "busy"
  // instead of queueing for ever, and the runner's own, so no amount of API
  // load can keep a tick waiting for a connection.
  const db =
    deps.db ??
    createDb(config.databaseUrl as string, {
      connectionLimit: config.dbPoolSize,
      queueLimit: config.dbQueueLimit,
    })
  const ownsDb = deps.db === undefined
  const runnerDb =
    config.runner !== 'on'
      ? null
      : (deps.runnerDb ??
        (config.databaseUrl
          ? createDb(config.databaseUrl, { connectionLimit: config.runnerDbPoolSize })
          : db))
  const ownsRunnerDb = runnerDb !== null && runnerDb !== db && deps.runnerDb === undefined
  const registry = deps.registry ?? createDefaultRegistry()
  const clock = deps.clock ?? systemClock
  const metrics = deps.metrics ?? createMetrics({ log: logger, now: () => clock.now().getTime() })
  const out = deps.out ?? process.stdout

  // Without configured tokens: one admin token for this process, printed once,
  // and never listen beyond this machine.
  let tokens: readonly TokenEntry[] = config.tokens
  let generatedToken: string | null = null
  let host = config.host
  if (tokens.length === 0) {
    generatedToken = deps.adminToken?.token ?? generateToken()
    tokens = [{ role: 'admin', token: generatedToken, actor: tokenActor('admin', generatedToken) }]
    host = '127.0.0.1'
  }

  const runCounts = runCountsFor(db, {
    onRefreshError: (err) =>
      logger.warn({ err }, 'metrics: could not count the terminal runs; the last counts stay'),
  })
  // Changes made by this process wake the live feeds at once (see changeSignal.ts).
  const changes = new ChangeSignal()
  // A tick that finished a step changed a run; the feeds look after the tick.
  let tickChangedRuns = false

  const runner =
    config.runner === 'on'
      ? new Runner({
          db: runnerDb as Db,
          registry,
          clock,
          instanceId: config.instanceId,
          tickMs: config.tickMs,
          leaseMs: config.leaseMs,
          batchSize: config.runnerBatchSize,
          parallelism: config.runnerParallelism,
          startConcurrency: config.runnerStartConcurrency,
          horizonMs: config.materializeHorizonHours * 3_600_000,
          logRetentionMs: config.logRetentionDays * 86_400_000,
          runRetentionMs: config.runRetentionDays * 86_400_000,
          settings: { webhookAllow: config.webhookAllow },
          logger: logger.child({ component: 'runner' }),
          observer: {
            stepFinished: (kind, outcome) => {
              metrics.steps.inc({ kind, outcome })
              tickChangedRuns = true
            },
            claimConflict: () => metrics.claimConflicts.inc(),
            tickDuration: (ms) => {
              metrics.tickDuration.observe(ms / 1000)
              if (tickChangedRuns) changes.notify()
              tickChangedRuns = false
            },
            tickError: () => metrics.tickErrors.inc(),
            tickLag: (ms) => metrics.tickLagMs.set(ms),
            runsDeleted: (byStatus) => runCounts.adjustForDeletedRuns(byStatus),
          },
        })
      : null

  const poller = new StatusPoller({
    db,
    intervalMs: config.statusPollMs,
    logger,
    onWatchersChange: (delta) => metrics.openSubscriptions.inc(delta),
  })

  const feedOptions = {
    db,
    intervalMs: config.statusPollMs,
    logger,
    onWatchersChange: (delta: 1 | -1) => metrics.openSubscriptions.inc(delta),
  }
  const runChanges = new RunChangeFeed(feedOptions)
  const inbox = new InboxFeed(feedOptions)
  changes.on(() => runChanges.wake())
  changes.on(() => inbox.wake())

  const services: ApiServices = {
    db,
    registry,
    clock,
    metrics,
    poller,
    runChanges,
    inbox,
    logger,
    tickMs: config.tickMs,
    horizonMs: config.materializeHorizonHours * 3_600_000,
    maxOccurrences: config.limits.maxOccurrences,
    nudge: () => runner?.nudge(),
    requestMaterialise: () => runner?.requestMaterialise(),
  }

  const principalOf = (initial: YogaInitialContext & { [WS_PRINCIPAL]?: Principal }): Principal | null => {
    const fromWs = initial[WS_PRINCIPAL]
    if (fromWs) return fromWs
    return authenticate(initial.request?.headers.get('authorization'), tokens)
  }

  const yogaLog = logger.child({ component: 'graphql' })
  // biome-ignore lint/suspicious/noExplicitAny: node:http server context
  const yoga = createYoga<any, ApiContext>({
    schema,
    graphqlEndpoint: GRAPHQL_PATH,
    landingPage: false,
    multipart: false,
    maxRequestBodySize: config.maxBodyBytes,
    logging: {
      debug: (...args: unknown[]) => yogaLog.debug({ args }, 'yoga'),
      info: (...args: unknown[]) => yogaLog.debug({ args }, 'yoga'),
      warn: (...args: unknown[]) => yogaLog.warn({ args: args.map(String) }, 'yoga warning'),
      error: (...args: unknown[]) => yogaLog.debug({ err: args[0] }, 'yoga error'),
    },
    maskedErrors: { maskError: createMaskError(logger) },
    // Bearer tokens, not cookies: any origin may call with its own token, none gets ours.
    cors: {
      origin: '*',
      credentials: false,
      methods: ['GET', 'POST'],
      allowedHeaders: ['authorization', 'content-type', 'accept', CSRF_HEADER],
      maxAge: 600,
    },
    graphiql: {
      title: 'showrunner GraphiQL',
      // The page itself needs no token; every request it sends does.
      headers: JSON.stringify({ Authorization: 'Bearer PASTE-YOUR-TOKEN-HERE' }, null, 2),
      defaultEditorToolsVisibility: 'headers',
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
    },
    // Every asset from this server: GraphiQL works with no network beyond it.
    renderGraphiQL: renderSelfHostedGraphiQL,
    context: (initial) => createApiContext(services, principalOf(initial)),
    plugins: [
      useCsrfPrevention([CSRF_HEADER]),
      useAuthGate(tokens, logger.child({ component: 'auth' })),
      useDocumentNestingLimit(),
      maxTokensPlugin({ n: config.limits.maxTokens, ...tokenLimitReports(config.limits.maxTokens) }),
      maxDepthPlugin({
        n: config.limits.maxDepth,
        // Introspection nests `ofType` deeper than any query needs; the query
        // budget bounds it instead (one __schema, list nesting at most 3).
        ignoreIntrospection: true,
        flattenFragments: true,
        ...armorReports('MAX_QUERY_DEPTH'),
      }),
      maxAliasesPlugin({ n: config.limits.maxAliases, ...armorReports('MAX_QUERY_ALIASES') }),
      useQueryBudget({ maxCost: config.limits.maxCost, maxOccurrences: config.limits.maxOccurrences }),
      useValidationErrorCodes(),
      useChangeSignalAfterMutations(changes),
      useQueryJit({
        onCompileError: (operationName, errors) =>
          yogaLog.warn(
            { operationName, errors: errors.map(String).slice(0, 3) },
            'graphql-jit could not compile a query; it runs on graphql-js',
          ),
      }),
    ],
  })

  // The unauthenticated probes read snapshots: a scrape flood costs one read per
  // PROBE_SNAPSHOT_MS, not statements per scrape.
  const runCountsSnapshot = createSnapshot(() => runCounts(), PROBE_SNAPSHOT_MS)
  const attention = createSnapshot(async () => {
    const [waiting, degradedRuns] = await Promise.all([waitingSummary(db), countDegraded(db)])
    return { waitingSteps: waiting.count, oldestWaitingStepAt: waiting.oldestAt, degradedRuns }
  }, PROBE_SNAPSHOT_MS)
  const readiness = createSnapshot(async () => {
    let database = await db.ping()
    let pending = 0
    if (database) {
      try {
        pending = (await pendingMigrations(db)).length
      } catch {
        database = false
      }
    }
    return { database, pending }
  }, PROBE_SNAPSHOT_MS)
  // Rendering the page is CPU on the event loop the runner shares: a flood of
  // scrapes renders it once per second, not once per scrape.
  const metricsPage = createSnapshot(() => metrics.render(), 1000)
  metrics.setRunsByStatusSource(() => runCountsSnapshot.get())
  metrics.setAttentionSource(() => attention.get())

  async function probe(
    route: '/healthz' | '/readyz' | '/metrics',
    req: IncomingMessage,
    res: ServerResponse,
  ) {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD')
      sendJson(res, 405, { ok: false, error: 'Use GET.' })
      return
    }
    if (route === '/healthz') {
      sendJson(res, 200, { ok: true })
      return
    }
    if (route === '/readyz') {
      const reasons: string[] = []
      const { database, pending } = await readiness.get()
      if (!database) reasons.push('the database does not answer')
      if (pending > 0) reasons.push(`${pending} migration(s) pending`)
      if (stopping) reasons.push('shutting down')
      sendJson(res, reasons.length === 0 ? 200 : 503, {
        ok: reasons.length === 0,
        database,
        pendingMigrations: pending,
        reasons,
      })
      return
    }
    const { contentType, body } = await metricsPage.get()
    res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' })
    res.end(body)
  }

  // The operator console at `/`: a page that talks to /graphql like any client.
  const handleConsole = createConsoleHandler({
    pollMs: Math.max(500, config.statusPollMs),
    onBuildError: (err) => logger.error({ err }, 'the console could not be built'),
  })

  function handleRequest(req: IncomingMessage, res: ServerResponse): void {
    const target = requestTarget(req)
    if (!target.ok) {
      res.setHeader('connection', 'close')
      sendJson(res, 400, { ok: false, error: `Bad request: ${target.reason}.` })
      return
    }
    const pathname = target.pathname
    const route = routeOf(pathname)
    const stopTimer = metrics.httpRequestDuration.startTimer({ method: req.method ?? 'GET', route })
    res.once('close', () => stopTimer({ status: String(res.statusCode) }))
    if (route === '/healthz' || route === '/readyz' || route === '/metrics') {
      probe(route, req, res).catch((err) => {
        logger.error({ err, route }, 'probe failed')
        if (!res.headersSent) sendJson(res, 500, { ok: false })
        else res.destroy()
      })
      return
    }
    if (route === '/graphiql') {
      serveGraphiqlAsset(pathname, req, res).catch((err) => {
        logger.error({ err }, 'could not serve a GraphiQL asset')
        if (!res.headersSent) sendJson(res, 500, { ok: false })
        else res.destroy()
      })
      return
    }
    if (route === 'console') {
      handleConsole(req, res, pathname).catch((err) => {
        logger.error({ err }, 'console request failed')
        if (!res.headersSent) sendJson(res, 500, { ok: false })
        else res.destroy()
      })
      return
    }
    if (route === 'other') {
      sendJson(res, 404, { ok: false, error: `Not found. GraphQL is at ${GRAPHQL_PATH}.` })
      return
    }
    Promise.resolve(yoga(req, res)).catch((err: unknown) => {
      logger.error({ err }, 'unexpected error while answering a GraphQL request')
      if (!res.headersSent) sendJson(res, 500, { ok: false, error: 'Unexpected error.' })
      else res.destroy()
    })
  }

  const httpServer = createServer((req, res) => {
    // Whatever one request does wrong, it is answered here and never ends the process.
    try {
      handleRequest(req, res)
    } catch (err) {
      logger.error({ err, method: req.method }, 'unexpected error while routing a request')
      if (!res.headersSent) sendJson(res, 500, { ok: false, error: 'Unexpected error.' })
      else res.destroy()
    }
  })
  // Slow-loris guard: a client must send its headers promptly.
  httpServer.headersTimeout = 20_000
  httpServer.requestTimeout = 60_000

  let ws: WsTransport | null = null
  let started: StartedApp | null = null
  let stopping = false
  let stopPromise: Promise<void> | null = null

  async function start(): Promise<StartedApp> {
    if (started) return started
    if (stopping) throw new Error('This app was stopped; build a new one to start again.')
    if (deps.migrate !== false) {
      const result = await migrate(db)
      if (result.applied.length > 0) logger.info({ applied: result.applied }, 'applied database migrations')
    }
    ws = attachGraphqlWs({
      httpServer,
      path: GRAPHQL_PATH,
      yoga,
      tokens,
      maxPayloadBytes: config.maxBodyBytes,
      logger,
      maxOperations: config.limits.wsMaxSubscriptions,
      initTimeoutMs: config.limits.wsInitTimeoutMs,
    })
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err)
      httpServer.once('error', onError)
      httpServer.listen(config.port, host, () => {
        httpServer.off('error', onError)
        resolve()
      })
    })
    const address = httpServer.address() as AddressInfo
    started = { host, port: address.port, url: `http://${urlHost(host)}:${address.port}` }
    runner?.start()
    if (generatedToken) {
      const where = deps.adminToken
        ? `this admin token is kept in ${deps.adminToken.file} and stays the same across restarts`
        : 'this admin token was generated for this run (shown once)'
      out.write(
        `\nshowrunner: no SHOWRUNNER_TOKENS configured, so ${where}; listening on ${host} only:\n` +
          `  Authorization: Bearer ${generatedToken}\n\n`,
      )
    }
    logger.info({ url: started.url, runner: config.runner, tokens: tokens.map((t) => t.actor) }, 'listening')
    return started
  }

  async function doStop(): Promise<void> {
    stopping = true
    const closed = new Promise<void>((resolve) => {
      if (!httpServer.listening) return resolve()
      httpServer.close(() => resolve())
    })
    // Idle keep-alive sockets would otherwise hold close() open.
    httpServer.closeIdleConnections()
    try {
      await runner?.stop()
    } catch (err) {
      logger.error({ err }, 'the runner did not stop cleanly')
    }
    // Completing every watcher ends SSE streams and sends `complete` on WebSockets.
    await Promise.all([poller.close(), runChanges.close(), inbox.close()])
    await ws?.close()
    httpServer.closeIdleConnections()
    const force = setTimeout(() => httpServer.closeAllConnections(), 2000)
    force.unref()
    await closed
    clearTimeout(force)
    metrics.setRunsByStatusSource(null)
    metrics.setAttentionSource(null)
    if (ownsDb) await db.close()
    if (ownsRunnerDb) await runnerDb?.close()
    logger.info({}, 'stopped')
  }

  return {
    start,
    stop() {
      stopPromise ??= doStop()
      return stopPromise
    },
    runner,
    db,
    runnerDb,
    yoga,
    registry,
    metrics,
    poller,
    runChanges,
    inbox,
    generatedToken,
  }
}
