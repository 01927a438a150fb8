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
import { costLimitPlugin } from '@escape.tech/graphql-armor-cost-limit'
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth'
import { GraphQLError, type ValidationContext } from 'graphql'
import { createYoga, type YogaInitialContext, type YogaServerInstance } from 'graphql-yoga'
import { schema } from '../schema/index.ts'
import { createDb, type Db } from '../sql/db.ts'
import { countDegraded } from '../sql/eventRuns/index.ts'
import { waitingSummary } from '../sql/eventSteps.ts'
import { migrate, pendingMigrations } from '../sql/migrate.ts'
import { type ApiContext, type ApiServices, createApiContext } from './api/context.ts'
import { useDocumentNestingLimit } from './api/documentLimits.ts'
import { API_CODES, createMaskError, useValidationErrorCodes } from './api/errors.ts'
import { CSRF_HEADER, useAuthGate, useCsrfPrevention } from './api/httpGuards.ts'
import { useQueryJit } from './api/jit.ts'
import { StatusPoller } from './api/statusPoller.ts'
import { attachGraphqlWs, WS_PRINCIPAL, type WsTransport } from './api/ws.ts'
import { authenticate, type Principal, type TokenEntry, tokenActor } from './auth.ts'
import { type Config, generateToken } from './config.ts'
import { createLogger, type Logger } from './log.ts'
import { createMetrics, type Metrics } from './metrics.ts'
import { createRunCounts } from './runCounts.ts'
import { type Clock, systemClock } from './runner/clock.ts'
import { Runner } from './runner/runner.ts'
import { createDefaultRegistry, type StepRegistry } from './runner/steps/registry.ts'

export const GRAPHQL_PATH = '/graphql'
/** Deepest selection accepted (introspection is exempt). */
export const MAX_QUERY_DEPTH = 10
/** Largest static query cost accepted (graphql-armor's cost model; introspection is exempt). */
export const MAX_QUERY_COST = 5000

/**
 * graphql-armor throws its rejection out of validation by default (so it reaches
 * clients as an HTTP 200 "Syntax Error"). Report it as the validation error it
 * is instead: HTTP 400, code GRAPHQL_VALIDATION_FAILED.
 */
const armorReports = {
  propagateOnRejection: false,
  onReject: [
    (ctx: ValidationContext | null, err: GraphQLError) =>
      ctx?.reportError(
        new GraphQLError(err.message.replace(/^Syntax Error:\s*/, ''), {
          extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED },
        }),
      ),
  ],
}

/** Optional collaborators of {@link buildApp}; everything has a production default. */
export interface BuildAppDeps {
  /** A pool to use instead of opening one on `config.databaseUrl`; the caller keeps ownership (stop() leaves it open). */
  db?: Db
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
  readonly db: Db
  // biome-ignore lint/suspicious/noExplicitAny: node:http server context
  readonly yoga: YogaServerInstance<any, ApiContext>
  readonly registry: StepRegistry
  readonly metrics: Metrics
  readonly poller: StatusPoller
  /** The admin token generated because none was configured (printed once by start()); null otherwise. */
  readonly generatedToken: string | null
}

type Route = '/graphql' | '/healthz' | '/readyz' | '/metrics' | 'other'

function routeOf(pathname: string): Route {
  if (pathname === GRAPHQL_PATH || pathname === `${GRAPHQL_PATH}/`) return '/graphql'
  if (pathname === '/healthz' || pathname === '/readyz' || pathname === '/metrics') return pathname
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
  const db = deps.db ?? createDb(config.databaseUrl as string, { connectionLimit: config.dbPoolSize })
  const ownsDb = deps.db === undefined
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
    generatedToken = generateToken()
    tokens = [{ role: 'admin', token: generatedToken, actor: tokenActor('admin', generatedToken) }]
    host = '127.0.0.1'
  }

  const runCounts = createRunCounts(db, {
    onRefreshError: (err) =>
      logger.warn({ err }, 'metrics: could not count the terminal runs; the last counts stay'),
  })

  const runner =
    config.runner === 'on'
      ? new Runner({
          db,
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
            stepFinished: (kind, outcome) => metrics.steps.inc({ kind, outcome }),
            claimConflict: () => metrics.claimConflicts.inc(),
            tickDuration: (ms) => metrics.tickDuration.observe(ms / 1000),
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

  const services: ApiServices = {
    db,
    registry,
    clock,
    metrics,
    poller,
    logger,
    tickMs: config.tickMs,
    horizonMs: config.materializeHorizonHours * 3_600_000,
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
    context: (initial) => createApiContext(services, principalOf(initial)),
    plugins: [
      useCsrfPrevention([CSRF_HEADER]),
      useAuthGate(tokens),
      useDocumentNestingLimit(),
      maxDepthPlugin({
        n: MAX_QUERY_DEPTH,
        ignoreIntrospection: true,
        flattenFragments: true,
        ...armorReports,
      }),
      costLimitPlugin({ maxCost: MAX_QUERY_COST, ignoreIntrospection: true, ...armorReports }),
      useValidationErrorCodes(),
      useQueryJit({
        onCompileError: (operationName, errors) =>
          yogaLog.warn(
            { operationName, errors: errors.map(String).slice(0, 3) },
            'graphql-jit could not compile a query; it runs on graphql-js',
          ),
      }),
    ],
  })

  metrics.setRunsByStatusSource(runCounts)
  metrics.setAttentionSource(async () => {
    const [waiting, degradedRuns] = await Promise.all([waitingSummary(db), countDegraded(db)])
    return { waitingSteps: waiting.count, oldestWaitingStepAt: waiting.oldestAt, degradedRuns }
  })

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
      let database = await db.ping()
      let pending = 0
      if (database) {
        try {
          pending = (await pendingMigrations(db)).length
        } catch {
          database = false
        }
      }
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
    const { contentType, body } = await metrics.render()
    res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' })
    res.end(body)
  }

  const httpServer = createServer((req, res) => {
    const pathname = new URL(req.url ?? '/', 'http://localhost').pathname
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
    if (route === 'other') {
      sendJson(res, 404, { ok: false, error: `Not found. GraphQL is at ${GRAPHQL_PATH}.` })
      return
    }
    yoga(req, res)
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
      out.write(
        `\nshowrunner: no SHOWRUNNER_TOKENS configured, so this admin token was generated for this run (shown once; listening on ${host} only):\n` +
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
    await poller.close()
    await ws?.close()
    httpServer.closeIdleConnections()
    const force = setTimeout(() => httpServer.closeAllConnections(), 2000)
    force.unref()
    await closed
    clearTimeout(force)
    metrics.setRunsByStatusSource(null)
    metrics.setAttentionSource(null)
    if (ownsDb) await db.close()
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
    yoga,
    registry,
    metrics,
    poller,
    generatedToken,
  }
}
