/**
 * Configuration from the environment (the table in README.md), validated once at start.
 *
 * Every problem is reported at once, each message naming its variable and what
 * it got, so a person fixes the whole environment in one go instead of one
 * restart per typo. Values in SHOWRUNNER_TOKENS are secrets and are never echoed.
 */
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { z } from 'zod'
import { redactDatabaseUrl } from '../sql/db.ts'
import type { TokenEntry } from './auth.ts'
import {
  databaseUrlSchema,
  instanceIdSchema,
  MIN_TOKEN_LENGTH,
  oneOf,
  optionalString,
  tokensSchema,
  urlSetting,
  webhookAllowSchema,
  wholeNumber,
} from './configSettings.ts'
import { loadOidcConfig, type OidcConfig } from './identity/oidcConfig.ts'
import { DEFAULT_LIMITS, type RequestLimits } from './requestLimits.ts'

/**
 * runChanges deliveries per second on an instance with a runner, unless
 * FANOUT_DELIVERIES_PER_SECOND says otherwise: at showtime (2,000 shows, 40
 * dashboards) it kept GO and the show's length where they were without the
 * dashboards' full fan-out (docs/performance.md, eleventh round).
 */
const DEFAULT_FANOUT_PER_SECOND_WITH_RUNNER = 2000

export { MIN_TOKEN_LENGTH, splitNamedToken } from './configSettings.ts'

/** pino's level names, lowest-volume last; `silent` turns logging off. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

/** The whole configuration, defaults applied. */
export interface Config {
  /** TCP port for HTTP and WebSocket; 0 picks a free one. @default 4000 */
  port: number
  /**
   * Address to bind. @default '0.0.0.0' with tokens configured; always
   * '127.0.0.1' without (an unauthenticated-by-default server stays local).
   */
  host: string
  /** `mysql://user:pass@host:port/db`; undefined starts a private MariaDB. */
  databaseUrl: string | undefined
  /** Milliseconds between runner ticks. @default 1000 */
  tickMs: number
  /** Milliseconds a claim lasts; always longer than a tick. @default 30000 */
  leaseMs: number
  /** 'off' makes an API-only instance with no tick loop. @default 'on' */
  runner: 'on' | 'off'
  /** Configured bearer tokens; empty means the server generates an admin token at start. @default [] */
  tokens: TokenEntry[]
  /** Normalised URL prefixes a webhook may call; empty allows none. @default [] */
  webhookAllow: string[]
  /** Largest request body accepted, in bytes. @default 1048576 */
  maxBodyBytes: number
  /** @default 'info' */
  logLevel: LogLevel
  /** Days a terminal run's logs are kept. @default 30 */
  logRetentionDays: number
  /** Days a terminal run (with its steps and logs) is kept; 0 keeps every run. @default 90 */
  runRetentionDays: number
  /** Milliseconds between polls behind the live subscriptions (runStatus, runChanges, waitingSteps). @default 500 */
  statusPollMs: number
  /** Deliveries (changed runs × subscribers) one runChanges poll starts at most; the rest waits an interval (FANOUT_DELIVERIES_PER_POLL). @default 20000 */
  fanoutDeliveriesPerPoll: number
  /**
   * Deliveries all runChanges subscribers together take per second at most;
   * waiting ones fold into runs' newest states; 0: no pace
   * (FANOUT_DELIVERIES_PER_SECOND). @default 2000 with a runner, 0 without
   * (the pace keeps the runner's share of the CPU; an API-only instance is
   * there to serve the API).
   */
  fanoutDeliveriesPerSecond: number
  /**
   * How far ahead schedules are materialised into runs, in hours
   * (MATERIALIZE_HORIZON_HOURS: the variable, like the column
   * `materialized_through`, keeps the spelling it shipped with). @default 24
   */
  materialiseHorizonHours: number
  /** Runs per start transaction and per in-flight claim statement. @default 2000 */
  runnerBatchSize: number
  /** Steps a batch of runs executes at once, and runs advanced one by one at once. @default 16 */
  runnerParallelism: number
  /** Start transactions in flight at once while a backlog of due runs drains. @default 4 */
  runnerStartConcurrency: number
  /** Batches the runner's wake lane (answered cues, timers run out) advances at once; 0: no lane. @default 16 */
  runnerWakeBatches: number
  /** This process's name in claims and heartbeats. @default `${hostname}-${pid}-${4 hex}` */
  instanceId: string
  // Notifications (docs/notifications.md).
  /** Where people reach this server (answer links, console links in notifications); null = no links. */
  publicUrl: string | null
  /** The mail server EMAIL channels send through, e.g. smtp://mail:25; null = EMAIL channels fail. */
  smtpUrl: string | null
  /** The From address of notification mails. @default 'showrunner@localhost' */
  smtpFrom: string
  /** Milliseconds between the dispatcher's looks for due deliveries. @default 500 */
  notifyPollMs: number
  /** Days a finished notification (event and deliveries) is kept. @default 30 */
  notificationRetentionDays: number
  /** Limits on what one client may ask for (docs/security.md). */
  limits: RequestLimits
  /** Connections the API may hold open to the database. @default 10 */
  dbPoolSize: number
  /** API statements that may wait for a connection before the API answers "busy". @default 100 */
  dbQueueLimit: number
  /** Connections the runner holds, apart from the API's so API load cannot starve it. @default 8 */
  runnerDbPoolSize: number
  /** GraphQL queries and mutations (HTTP and WebSocket) worked on at once (GRAPHQL_MAX_IN_FLIGHT; src/api/admission.ts). @default 32 */
  graphqlMaxInFlight: number
  /** GraphQL requests that may wait for one of those; past them BUSY at once (GRAPHQL_MAX_QUEUED). @default 256 */
  graphqlMaxQueued: number
  /** Listeners on the HTTP port, each accepting one connection per turn of the loop (HTTP_ACCEPT_LISTENERS; src/acceptListeners.ts). @default 8 */
  httpAcceptListeners: number
  /** Runs one principal may create per minute, over every mutation that creates runs (MAX_RUNS_PER_MINUTE). @default 10000 */
  maxRunsPerMinute: number
  /** Days an audit_log row is kept; 0 keeps every row (AUDIT_RETENTION_DAYS). @default 90 */
  auditRetentionDays: number
  /** Single sign-on (OIDC_*): bearer JWTs from this issuer are accepted; null when OIDC_ISSUER is unset. */
  oidc: OidcConfig | null
  /** Things worth telling the operator at start that are not errors. */
  warnings: string[]
}

/** Invalid configuration; `problems` holds one message per variable at fault. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError'
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
}

/** A fresh admin token: 32 random bytes, base64url (43 characters). */
export function generateToken(): string {
  return randomBytes(32).toString('base64url')
}

const envSchema = z
  .object({
    PORT: wholeNumber('PORT', 4000, 0, 65535, 'a whole number from 0 to 65535'),
    HOST: optionalString,
    DATABASE_URL: databaseUrlSchema,
    TICK_MS: wholeNumber('TICK_MS', 1000, 10, 3_600_000, 'a whole number of milliseconds ≥ 10'),
    LEASE_MS: wholeNumber('LEASE_MS', 30_000, 10, 86_400_000, 'a whole number of milliseconds ≥ 10'),
    RUNNER: oneOf('RUNNER', ['on', 'off'] as const, 'on'),
    SHOWRUNNER_TOKENS: tokensSchema,
    WEBHOOK_ALLOW: webhookAllowSchema,
    MAX_BODY_BYTES: wholeNumber(
      'MAX_BODY_BYTES',
      1_048_576,
      1024,
      1024 ** 3,
      'a whole number of bytes ≥ 1024',
    ),
    LOG_LEVEL: oneOf('LOG_LEVEL', LOG_LEVELS, 'info'),
    LOG_RETENTION_DAYS: wholeNumber('LOG_RETENTION_DAYS', 30, 1, 36_500, 'a whole number of days ≥ 1'),
    RUN_RETENTION_DAYS: wholeNumber(
      'RUN_RETENTION_DAYS',
      90,
      0,
      36_500,
      'a whole number of days (0 keeps every run)',
    ),
    STATUS_POLL_MS: wholeNumber('STATUS_POLL_MS', 500, 10, 3_600_000, 'a whole number of milliseconds ≥ 10'),
    FANOUT_DELIVERIES_PER_POLL: wholeNumber(
      'FANOUT_DELIVERIES_PER_POLL',
      20_000,
      100,
      100_000_000,
      'a whole number from 100 to 100000000',
    ),
    // Unset (-1) takes its default from RUNNER, below.
    FANOUT_DELIVERIES_PER_SECOND: wholeNumber(
      'FANOUT_DELIVERIES_PER_SECOND',
      -1,
      0,
      100_000_000,
      'a whole number from 0 (no pace) to 100000000',
    ),
    MATERIALIZE_HORIZON_HOURS: wholeNumber(
      'MATERIALIZE_HORIZON_HOURS',
      24,
      1,
      8760,
      'a whole number of hours from 1 to 8760',
    ),
    INSTANCE_ID: instanceIdSchema,
    PUBLIC_URL: urlSetting('PUBLIC_URL', ['http:', 'https:']),
    SMTP_URL: urlSetting('SMTP_URL', ['smtp:', 'smtps:']),
    SMTP_FROM: optionalString,
    NOTIFY_POLL_MS: wholeNumber('NOTIFY_POLL_MS', 500, 10, 3_600_000, 'a whole number of milliseconds ≥ 10'),
    NOTIFICATION_RETENTION_DAYS: wholeNumber(
      'NOTIFICATION_RETENTION_DAYS',
      30,
      1,
      36_500,
      'a whole number of days ≥ 1',
    ),
    MAX_QUERY_DEPTH: wholeNumber(
      'MAX_QUERY_DEPTH',
      DEFAULT_LIMITS.maxDepth,
      2,
      100,
      'a whole number from 2 to 100',
    ),
    MAX_QUERY_COST: wholeNumber(
      'MAX_QUERY_COST',
      DEFAULT_LIMITS.maxCost,
      10,
      10_000_000,
      'a whole number from 10 to 10000000',
    ),
    MAX_QUERY_ALIASES: wholeNumber(
      'MAX_QUERY_ALIASES',
      DEFAULT_LIMITS.maxAliases,
      0,
      100_000,
      'a whole number from 0 to 100000',
    ),
    MAX_QUERY_TOKENS: wholeNumber(
      'MAX_QUERY_TOKENS',
      DEFAULT_LIMITS.maxTokens,
      100,
      1_000_000,
      'a whole number from 100 to 1000000',
    ),
    MAX_OCCURRENCES_PER_REQUEST: wholeNumber(
      'MAX_OCCURRENCES_PER_REQUEST',
      DEFAULT_LIMITS.maxOccurrences,
      1,
      1_000_000,
      'a whole number from 1 to 1000000',
    ),
    WS_MAX_SUBSCRIPTIONS: wholeNumber(
      'WS_MAX_SUBSCRIPTIONS',
      DEFAULT_LIMITS.wsMaxSubscriptions,
      1,
      100_000,
      'a whole number from 1 to 100000',
    ),
    SUBSCRIPTIONS_PER_PRINCIPAL: wholeNumber(
      'SUBSCRIPTIONS_PER_PRINCIPAL',
      DEFAULT_LIMITS.subscriptionsPerPrincipal,
      1,
      1_000_000,
      'a whole number from 1 to 1000000',
    ),
    SUBSCRIPTIONS_PER_INSTANCE: wholeNumber(
      'SUBSCRIPTIONS_PER_INSTANCE',
      DEFAULT_LIMITS.subscriptionsPerInstance,
      1,
      1_000_000,
      'a whole number from 1 to 1000000',
    ),
    WS_INIT_TIMEOUT_MS: wholeNumber(
      'WS_INIT_TIMEOUT_MS',
      DEFAULT_LIMITS.wsInitTimeoutMs,
      100,
      600_000,
      'a whole number of milliseconds from 100 to 600000',
    ),
    // Bounds that keep one principal from hurting everyone (docs/security.md).
    MAX_ANSWER_BYTES: wholeNumber(
      'MAX_ANSWER_BYTES',
      DEFAULT_LIMITS.maxAnswerBytes,
      65_536,
      512 * 1024 * 1024,
      'a whole number of bytes from 65536 to 536870912',
    ),
    MAX_PARAMS_BYTES: wholeNumber(
      'MAX_PARAMS_BYTES',
      DEFAULT_LIMITS.maxParamsBytes,
      2,
      16 * 1024 * 1024,
      'a whole number of bytes from 2 to 16777216',
    ),
    MAX_RUNS_PER_MINUTE: wholeNumber(
      'MAX_RUNS_PER_MINUTE',
      10_000,
      1,
      10_000_000,
      'a whole number from 1 to 10000000',
    ),
    AUDIT_RETENTION_DAYS: wholeNumber(
      'AUDIT_RETENTION_DAYS',
      90,
      0,
      36_500,
      'a whole number of days (0 keeps every row)',
    ),
    DB_POOL_SIZE: wholeNumber('DB_POOL_SIZE', 10, 1, 1000, 'a whole number of connections from 1 to 1000'),
    DB_QUEUE_LIMIT: wholeNumber(
      'DB_QUEUE_LIMIT',
      100,
      1,
      1_000_000,
      'a whole number of waiting statements from 1 to 1000000',
    ),
    RUNNER_DB_POOL_SIZE: wholeNumber(
      'RUNNER_DB_POOL_SIZE',
      8,
      2,
      100,
      'a whole number of connections from 2 to 100',
    ),
    GRAPHQL_MAX_IN_FLIGHT: wholeNumber(
      'GRAPHQL_MAX_IN_FLIGHT',
      32,
      1,
      10_000,
      'a whole number of requests from 1 to 10000',
    ),
    GRAPHQL_MAX_QUEUED: wholeNumber(
      'GRAPHQL_MAX_QUEUED',
      256,
      0,
      1_000_000,
      'a whole number of waiting requests from 0 to 1000000',
    ),
    HTTP_ACCEPT_LISTENERS: wholeNumber(
      'HTTP_ACCEPT_LISTENERS',
      8,
      1,
      64,
      'a whole number of listeners from 1 to 64',
    ),
    RUNNER_BATCH_SIZE: wholeNumber('RUNNER_BATCH_SIZE', 2000, 1, 10_000, 'a whole number from 1 to 10000'),
    RUNNER_PARALLELISM: wholeNumber('RUNNER_PARALLELISM', 32, 1, 1000, 'a whole number from 1 to 1000'),
    RUNNER_START_CONCURRENCY: wholeNumber(
      'RUNNER_START_CONCURRENCY',
      4,
      1,
      64,
      'a whole number from 1 to 64',
    ),
    RUNNER_WAKE_BATCHES: wholeNumber(
      'RUNNER_WAKE_BATCHES',
      16,
      0,
      256,
      'a whole number from 0 (no wake lane) to 256',
    ),
  })
  .superRefine((env, ctx) => {
    // A lease that can expire before its holder's next tick lets another instance
    // take a run that is still being worked on.
    if (env.LEASE_MS <= env.TICK_MS) {
      ctx.addIssue({
        code: 'custom',
        message: `LEASE_MS (${env.LEASE_MS}) must be greater than TICK_MS (${env.TICK_MS})`,
      })
    }
  })

function defaultInstanceId(): string {
  return `${hostname().slice(0, 80)}-${process.pid}-${randomBytes(2).toString('hex')}`
}

/**
 * Read and validate the configuration.
 * @throws {ConfigError} listing every invalid variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = envSchema.safeParse(env)
  const { oidc, problems: oidcProblems } = loadOidcConfig(env)
  if (!parsed.success) throw new ConfigError([...parsed.error.issues.map((i) => i.message), ...oidcProblems])
  if (oidcProblems.length > 0) throw new ConfigError(oidcProblems)
  const e = parsed.data
  const warnings: string[] = []
  let host: string
  if (e.SHOWRUNNER_TOKENS.length > 0) {
    host = e.HOST ?? '0.0.0.0'
  } else {
    // Without configured tokens the only credential is one generated at start and
    // printed to this console: never expose that server beyond this machine.
    host = '127.0.0.1'
    if (e.HOST !== undefined && e.HOST !== host) {
      warnings.push(
        `HOST=${e.HOST} ignored: no SHOWRUNNER_TOKENS are configured, so the server binds 127.0.0.1 only. Set SHOWRUNNER_TOKENS to listen on other addresses.`,
      )
    }
  }
  for (const t of e.SHOWRUNNER_TOKENS) {
    if (t.token.length < MIN_TOKEN_LENGTH) {
      warnings.push(
        `SHOWRUNNER_TOKENS: the ${t.role} token ${t.actor} is only ${t.token.length} characters; use at least ${MIN_TOKEN_LENGTH} (npx showrunner token makes one).`,
      )
    }
  }
  return {
    port: e.PORT,
    host,
    databaseUrl: e.DATABASE_URL,
    tickMs: e.TICK_MS,
    leaseMs: e.LEASE_MS,
    runner: e.RUNNER,
    tokens: e.SHOWRUNNER_TOKENS,
    webhookAllow: e.WEBHOOK_ALLOW,
    maxBodyBytes: e.MAX_BODY_BYTES,
    logLevel: e.LOG_LEVEL,
    logRetentionDays: e.LOG_RETENTION_DAYS,
    runRetentionDays: e.RUN_RETENTION_DAYS,
    statusPollMs: e.STATUS_POLL_MS,
    fanoutDeliveriesPerPoll: e.FANOUT_DELIVERIES_PER_POLL,
    fanoutDeliveriesPerSecond:
      e.FANOUT_DELIVERIES_PER_SECOND >= 0
        ? e.FANOUT_DELIVERIES_PER_SECOND
        : e.RUNNER === 'on'
          ? DEFAULT_FANOUT_PER_SECOND_WITH_RUNNER
          : 0,
    materialiseHorizonHours: e.MATERIALIZE_HORIZON_HOURS,
    runnerBatchSize: e.RUNNER_BATCH_SIZE,
    runnerParallelism: e.RUNNER_PARALLELISM,
    runnerStartConcurrency: e.RUNNER_START_CONCURRENCY,
    runnerWakeBatches: e.RUNNER_WAKE_BATCHES,
    instanceId: e.INSTANCE_ID ?? defaultInstanceId(),
    publicUrl: e.PUBLIC_URL?.replace(/\/+$/, '') ?? null,
    smtpUrl: e.SMTP_URL ?? null,
    smtpFrom: e.SMTP_FROM ?? 'showrunner@localhost',
    notifyPollMs: e.NOTIFY_POLL_MS,
    notificationRetentionDays: e.NOTIFICATION_RETENTION_DAYS,
    limits: {
      maxDepth: e.MAX_QUERY_DEPTH,
      maxCost: e.MAX_QUERY_COST,
      maxAliases: e.MAX_QUERY_ALIASES,
      maxTokens: e.MAX_QUERY_TOKENS,
      maxOccurrences: e.MAX_OCCURRENCES_PER_REQUEST,
      wsMaxSubscriptions: e.WS_MAX_SUBSCRIPTIONS,
      wsInitTimeoutMs: e.WS_INIT_TIMEOUT_MS,
      subscriptionsPerPrincipal: e.SUBSCRIPTIONS_PER_PRINCIPAL,
      subscriptionsPerInstance: e.SUBSCRIPTIONS_PER_INSTANCE,
      maxAnswerBytes: e.MAX_ANSWER_BYTES,
      maxParamsBytes: e.MAX_PARAMS_BYTES,
    },
    maxRunsPerMinute: e.MAX_RUNS_PER_MINUTE,
    auditRetentionDays: e.AUDIT_RETENTION_DAYS,
    dbPoolSize: e.DB_POOL_SIZE,
    dbQueueLimit: e.DB_QUEUE_LIMIT,
    runnerDbPoolSize: e.RUNNER_DB_POOL_SIZE,
    graphqlMaxInFlight: e.GRAPHQL_MAX_IN_FLIGHT,
    graphqlMaxQueued: e.GRAPHQL_MAX_QUEUED,
    httpAcceptListeners: e.HTTP_ACCEPT_LISTENERS,
    oidc,
    warnings,
  }
}

/** The configuration with secrets removed (tokens become their actor names), for the start-up log. */
export function configSummary(config: Config): Record<string, unknown> {
  const { tokens, databaseUrl, ...rest } = config
  return {
    ...rest,
    tokens: tokens.map((t) => t.actor),
    databaseUrl: databaseUrl === undefined ? undefined : redactUrl(databaseUrl),
  }
}

function redactUrl(raw: string): string {
  return redactDatabaseUrl(raw)
}
