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
 * stop the runner (the current step finishes, claims are released) → close
 * WebSocket sockets with 1001 "Going away", then complete every remaining
 * subscription (SSE streams end) → drain HTTP connections → close the
 * database pool.
 */

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { YogaServerInstance } from 'graphql-yoga'
import { CONSOLE_PATHS, createConsoleHandler } from '../console/serve.ts'
import type { Db } from '../sql/db.ts'
import { migrate } from '../sql/migrate.ts'
import { type AcceptListeners, listenHttp } from './acceptListeners.ts'
import { Admission, admitHttp } from './api/admission.ts'
import { ChangeSignal } from './api/changeSignal.ts'
import type { ApiContext, ApiServices } from './api/context.ts'
import { DEFINITION_SCHEMA_PATH, serveDefinitionSchema } from './api/definitionSchema.ts'
import { GRAPHIQL_ASSET_PATH, serveGraphiqlAsset } from './api/graphiql.ts'
import type { InboxBell } from './api/inboxBell.ts'
import type { InboxFeed } from './api/inboxFeed.ts'
import { openLiveFeeds } from './api/liveFeeds.ts'
import { requestTarget } from './api/requestTarget.ts'
import type { RunChangeFeed } from './api/runChangeFeed.ts'
import { schema } from './api/schema.ts'
import type { StatusPoller } from './api/statusPoller.ts'
import { attachGraphqlWs, type WsTransport } from './api/ws.ts'
import { createApiYoga, GRAPHQL_PATH } from './api/yoga.ts'
import { type TokenEntry, tokenEntry } from './auth.ts'
import { type Config, generateToken } from './config.ts'
import { DoorbellRinger } from './doorbellRinger.ts'
import { sendJson } from './httpReply.ts'
import { Authenticator } from './identity/authenticator.ts'
import { ApiKeyring } from './identity/keyring.ts'
import { OidcVerifier } from './identity/oidc.ts'
import { AUTH_PATHS, createSsoHandler } from './identity/ssoEndpoints.ts'
import { createLogger, type Logger } from './log.ts'
import { createMetrics, type Metrics } from './metrics.ts'
import { createAnswerPageHandler, isAnswerPath } from './notify/answerPage.ts'
import { openPools } from './pools.ts'
import { createProbes, PROBE_SNAPSHOT_MS } from './probes.ts'
import { startLoggedQuietCollect } from './quietCollect.ts'
import { refusals } from './refusalSampler.ts'
import { runCountsFor } from './runCounts.ts'
import { type Clock, systemClock } from './runner/clock.ts'
import type { Runner } from './runner/runner.ts'
import { createDefaultRegistry, type StepRegistry } from './runner/steps/registry.ts'
import { hostRunner } from './runnerHost.ts'
import { createRunQuota } from './runQuota.ts'

// Callers (tests, the CLI) import these from the server.
export { GRAPHQL_PATH, PROBE_SNAPSHOT_MS }

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
  /** Least milliseconds between two fetches of the OIDC signing keys (tests of key rotation). @default 30000 */
  jwksCooldownMs?: number
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
  /** The cue inbox's polls' connection (the API's pool when no DATABASE_URL was given). */
  readonly inboxDb: Db
  /** The runChanges feed's connection (the API's pool when no DATABASE_URL was given). */
  readonly changesDb: Db
  // biome-ignore lint/suspicious/noExplicitAny: node:http server context
  readonly yoga: YogaServerInstance<any, ApiContext>
  readonly registry: StepRegistry
  readonly metrics: Metrics
  readonly poller: StatusPoller
  /** The pollers behind `runChanges` and `waitingSteps`. */
  readonly runChanges: RunChangeFeed
  readonly inbox: InboxFeed
  /** The inbox's doorbell, up while it has subscribers (src/api/inboxBell.ts). */
  readonly inboxBell: InboxBell
  /** The admin token generated because none was configured (printed once by start()); null otherwise. */
  readonly generatedToken: string | null
  /** How many GraphQL requests over HTTP are worked on and wait (src/api/admission.ts). */
  readonly admission: Admission
}

type Route =
  | '/graphql'
  | '/graphiql'
  | '/healthz'
  | '/readyz'
  | '/metrics'
  | typeof DEFINITION_SCHEMA_PATH
  | 'console'
  | 'auth'
  | 'answer'
  | 'other'

function routeOf(pathname: string): Route {
  if (pathname === GRAPHQL_PATH || pathname === `${GRAPHQL_PATH}/`) return '/graphql'
  if (pathname === '/healthz' || pathname === '/readyz' || pathname === '/metrics') return pathname
  if (pathname.startsWith(GRAPHIQL_ASSET_PATH)) return '/graphiql'
  if (pathname === DEFINITION_SCHEMA_PATH) return DEFINITION_SCHEMA_PATH
  if (CONSOLE_PATHS.has(pathname)) return 'console'
  if (AUTH_PATHS.has(pathname)) return 'auth'
  if (isAnswerPath(pathname)) return 'answer'
  return 'other'
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
  // The API's pool, the runner's, and the live feeds' connections (see pools.ts).
  const pools = openPools(config, deps)
  const { db, runnerDb } = pools
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
    tokens = [tokenEntry('admin', generatedToken)]
    host = '127.0.0.1'
  }

  const runCounts = runCountsFor(db, {
    onRefreshError: (err) =>
      logger.warn({ err }, 'metrics: could not count the terminal runs; the last counts stay'),
  })
  // Changes made by this process wake the live feeds at once (see changeSignal.ts).
  const changes = new ChangeSignal()
  // A round's write that parked cues: only the inbox needs to look at once.
  const cuesParked = new ChangeSignal()
  // The runner and the notification dispatcher, on instances that run the runner.
  const { runner, dispatcher } =
    config.runner === 'on'
      ? hostRunner(config, {
          db: runnerDb as Db,
          registry,
          clock,
          logger,
          metrics,
          runCounts,
          changes,
          cuesParked,
        })
      : { runner: null, dispatcher: null }
  // Runs made due here start at once: the co-hosted runner is nudged, or else the runners' doorbells rung.
  const ringer = runner ? null : new DoorbellRinger({ db, logger, freshMs: config.leaseMs })
  const nudgeRunner = () => (runner ? runner.nudge() : ringer?.ring())

  const {
    poller,
    runChanges,
    inbox,
    inboxBell,
    close: closeLiveFeeds,
  } = openLiveFeeds({
    config,
    pools,
    logger,
    metrics,
    changes,
    cuesParked: runner ? cuesParked : null,
  })
  changes.on(() => dispatcher?.nudge())

  // API keys are read through the API's pool; revocations are polled at the live feeds' pace.
  const keyring = new ApiKeyring({ db, pollMs: config.statusPollMs, logger })
  const oidc = config.oidc
    ? new OidcVerifier({
        config: config.oidc,
        logger,
        ...(deps.jwksCooldownMs === undefined ? {} : { jwksCooldownMs: deps.jwksCooldownMs }),
      })
    : null
  const authenticator = new Authenticator({ tokens, keyring, oidc })

  const services: ApiServices = {
    db,
    authenticator,
    registry,
    clock,
    metrics,
    poller,
    runChanges,
    inbox,
    logger,
    tickMs: config.tickMs,
    horizonMs: config.materialiseHorizonHours * 3_600_000,
    maxOccurrences: config.limits.maxOccurrences,
    maxParamsBytes: config.limits.maxParamsBytes,
    // Wall time, not the runner's clock: a quota is about requests per real minute.
    runQuota: createRunQuota(db, config.maxRunsPerMinute, () => new Date()),
    nudge: nudgeRunner,
    handOff: runner?.lane,
    requestMaterialise: () => runner?.requestMaterialise(),
    notifications: { webhookAllow: config.webhookAllow, nudge: () => dispatcher?.nudge() },
  }

  const yoga = createApiYoga({ schema, config, logger, authenticator, changes, services })
  // Bounded GraphQL work per instance: past it BUSY at once, before the body is read.
  const admission = new Admission({
    maxInFlight: config.graphqlMaxInFlight,
    maxQueued: config.graphqlMaxQueued,
    onRefused: (why) => {
      const suppressed = refusals.take('admission')
      if (suppressed === null) return
      logger.warn(
        { why, ...admission.stats(), ...(suppressed > 0 && { suppressed }) },
        'too many GraphQL requests at once: answered BUSY before any work',
      )
    },
  })

  const probe = createProbes({ db, metrics, runCounts, isStopping: () => stopping })

  // The operator console at `/`: a page that talks to /graphql like any client.
  const handleConsole = createConsoleHandler({
    pollMs: Math.max(500, config.statusPollMs),
    onBuildError: (err) => logger.error({ err }, 'the console could not be built'),
  })

  // The console's single sign-on: a public config and the code exchange.
  const handleAuth = createSsoHandler(config.oidc, logger.child({ component: 'sso' }))
  // Answer links from notifications (PUBLIC_URL): a page per cue, no token needed.
  const handleAnswerPage = createAnswerPageHandler({
    db,
    clock,
    nudge: nudgeRunner,
    handOff: runner?.lane,
    logger,
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
    if (route === DEFINITION_SCHEMA_PATH) {
      serveDefinitionSchema(req, res)
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
    if (route === 'auth') {
      handleAuth(req, res, pathname).catch((err) => {
        logger.error({ err }, 'sign-in request failed')
        if (!res.headersSent) sendJson(res, 500, { ok: false })
        else res.destroy()
      })
      return
    }
    if (route === 'answer') {
      handleAnswerPage(req, res, pathname).catch((err) => {
        logger.error({ err }, 'answer page request failed')
        if (!res.headersSent) sendJson(res, 500, { ok: false })
        else res.destroy()
      })
      return
    }
    if (route === 'other') {
      sendJson(res, 404, { ok: false, error: `Not found. GraphQL is at ${GRAPHQL_PATH}.` })
      return
    }
    const answer = () =>
      Promise.resolve()
        .then(() => yoga(req, res))
        .catch((err: unknown) => {
          logger.error({ err }, 'unexpected error while answering a GraphQL request')
          if (!res.headersSent) sendJson(res, 500, { ok: false, error: 'Unexpected error.' })
          else res.destroy()
        })
    // A CORS preflight is no work; anything else waits for its turn.
    if (req.method === 'OPTIONS') answer()
    else admitHttp(admission, req, res, answer)
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
  let quiet: { stop(): void } | null = null
  let acceptListeners: AcceptListeners | null = null
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
      authenticator,
      maxPayloadBytes: config.maxBodyBytes,
      logger,
      maxOperations: config.limits.wsMaxSubscriptions,
      initTimeoutMs: config.limits.wsInitTimeoutMs,
      admission,
    })
    acceptListeners = await listenHttp(httpServer, {
      port: config.port,
      host,
      listeners: config.httpAcceptListeners,
      onListenerFailure: (err) =>
        logger.warn(
          { err },
          'could not add listeners to the HTTP port: new connections are accepted one per turn',
        ),
    })
    const address = httpServer.address() as AddressInfo
    started = { host, port: address.port, url: `http://${urlHost(host)}:${address.port}` }
    // Start-up's garbage is collected here, before the runner starts; a busy spell's once quiet.
    quiet = startLoggedQuietCollect(logger, () => (runner ? runner.asleepForMs : null))
    runner?.start()
    dispatcher?.start()
    if (generatedToken) {
      const where = deps.adminToken
        ? `this admin token is kept in ${deps.adminToken.file} and stays the same across restarts`
        : 'this admin token was generated for this run (shown once)'
      out.write(
        `\nshowrunner: no SHOWRUNNER_TOKENS configured, so ${where}; listening on ${host} only:\n` +
          `  Authorization: Bearer ${generatedToken}\n\n`,
      )
    }
    logger.info({ url: started.url, runner: config.runner, tokens: tokens.map((t) => t.name) }, 'listening')
    return started
  }

  async function doStop(): Promise<void> {
    stopping = true
    quiet?.stop()
    const closed = new Promise<void>((resolve) => {
      if (!httpServer.listening) return resolve()
      httpServer.close(() => resolve())
    })
    const extraClosed = acceptListeners?.close()
    // Idle keep-alive sockets would otherwise hold close() open.
    httpServer.closeIdleConnections()
    admission.close()
    try {
      await runner?.stop()
    } catch (err) {
      logger.error({ err }, 'the runner did not stop cleanly')
    }
    await dispatcher?.stop()
    // WebSockets close (1001) before the feeds complete: a subscription the
    // feeds completed first would reach its client as finished, and a lazy
    // graphql-ws client, left with nothing open, closes with 1000 and does not
    // resubscribe; "going away" tells it to reconnect to another instance.
    await ws?.close()
    await closeLiveFeeds()
    await keyring.close()
    httpServer.closeIdleConnections()
    const force = setTimeout(() => httpServer.closeAllConnections(), 2000)
    force.unref()
    await Promise.all([closed, extraClosed])
    clearTimeout(force)
    metrics.setRunsByStatusSource(null)
    metrics.setAttentionSource(null)
    await ringer?.settled()
    await pools.close()
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
    inboxDb: pools.inboxDb,
    changesDb: pools.changesDb,
    yoga,
    registry,
    metrics,
    poller,
    runChanges,
    inbox,
    inboxBell,
    generatedToken,
    admission,
  }
}
