/**
 * The `showrunner` commands that run the server or its database: `serve`
 * (what `npm start` runs), `migrate`, `demo` and `token`. src/cli.ts loads
 * this module only when one of them runs, so the client commands for scripts
 * start without loading the server (about a second less per command).
 */
import { join } from 'node:path'
import { ensureDatabase, probeServer } from '../../sql/bootstrap.ts'
import { createDb, DB_ERRNO, isDbErrno, poolOptionsFromUrl } from '../../sql/db.ts'
import { migrate } from '../../sql/migrate.ts'
import { ADMIN_TOKEN_FILE, AdminTokenError, loadOrCreateAdminToken } from '../adminToken.ts'
import { type Config, ConfigError, generateToken, loadConfig } from '../config.ts'
import { loadDemo } from '../demo.ts'
import { installLastResortHandlers } from '../lastResort.ts'
import { createLogger, flushThenExit, type Logger } from '../log.ts'
import {
  MariadbNotInstalledError,
  type PrivateMariadb,
  PrivateMariadbInUseError,
  startPrivateMariadb,
} from '../privateMariadb.ts'
import { systemClock } from '../runner/clock.ts'
import { createDefaultRegistry } from '../runner/steps/registry.ts'
import { buildApp } from '../server.ts'

/** Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration or usage. */
const EXIT_CONFIG = 2
/** A second SIGINT/SIGTERM sooner than this after the first is the same request delivered twice. */
const REPEAT_SIGNAL_MS = 1000

function configOrExit(): Config {
  try {
    return loadConfig()
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`showrunner: the configuration is invalid:\n  - ${err.problems.join('\n  - ')}`)
      process.exit(EXIT_CONFIG)
    }
    throw err
  }
}

/**
 * A DATABASE_URL naming a database that does not exist yet on a reachable
 * server: create it (a fresh server is the common first run). Anything else,
 * an unreachable server included, is left for the server start to report.
 */
async function createDatabaseIfMissing(url: string, log: Logger): Promise<void> {
  try {
    await probeServer(url, 5000)
  } catch (err) {
    if (!isDbErrno(err, DB_ERRNO.BAD_DB)) return
    const name = poolOptionsFromUrl(url).database
    if (!name) return
    await ensureDatabase(url, name)
    log.info({ database: name }, 'created the database named in DATABASE_URL')
  }
}

/**
 * The database to use: DATABASE_URL when set, otherwise a private MariaDB in
 * `dataDir`. Exits with what to install or set when neither is possible.
 */
async function resolveDatabase(
  config: Config,
  log: Logger,
  dataDir: string,
  command: string,
): Promise<{ url: string; privateDb: PrivateMariadb | null }> {
  if (config.databaseUrl) {
    await createDatabaseIfMissing(config.databaseUrl, log)
    return { url: config.databaseUrl, privateDb: null }
  }
  try {
    log.info({ dir: dataDir }, 'no DATABASE_URL: starting a private MariaDB')
    const privateDb = await startPrivateMariadb({ dir: dataDir, log })
    return { url: privateDb.url, privateDb }
  } catch (err) {
    if (err instanceof MariadbNotInstalledError) {
      console.error(`showrunner: ${err.message}`)
      process.exit(1)
    }
    if (err instanceof PrivateMariadbInUseError) {
      // Most often a running `npm start`: its server can be shared through its socket.
      const extra = command === 'serve' ? ' PORT=4001' : ''
      console.error(
        `showrunner: the private MariaDB in ${dataDir} is in use by process ${err.ownerPid} (a running showrunner serve?).\n` +
          `To use its database while it runs, name its socket:\n` +
          `  DATABASE_URL='${err.url}'${extra} npx showrunner ${command}\n` +
          'or stop that process first, or pass another --data-dir.',
      )
      process.exit(1)
    }
    console.error(
      `showrunner: could not start a private MariaDB in ${dataDir}: ${(err as Error).message}\n` +
        'Set DATABASE_URL=mysql://user:pass@host:3306/showrunner to use an existing server instead.',
    )
    process.exit(1)
  }
}

export async function serve(opts: { dataDir: string; demo?: boolean }): Promise<void> {
  const config = configOrExit()
  const log = createLogger({ level: config.logLevel, instance: config.instanceId })
  for (const warning of config.warnings) log.warn({}, warning)
  const { url, privateDb } = await resolveDatabase(config, log, opts.dataDir, 'serve')
  // On the private database, a generated admin token is kept beside it so it survives restarts.
  let adminToken: { token: string; file: string } | undefined
  if (privateDb && config.tokens.length === 0) {
    try {
      const kept = await loadOrCreateAdminToken(join(opts.dataDir, ADMIN_TOKEN_FILE))
      if (kept.narrowedFrom !== undefined) {
        log.warn(
          { file: kept.file, mode: kept.narrowedFrom.toString(8) },
          'the admin token file was readable by others; narrowed it to 0600',
        )
      }
      adminToken = { token: kept.token, file: kept.file }
    } catch (err) {
      console.error(`showrunner: ${(err as Error).message}`)
      await privateDb.stop().catch(() => undefined)
      process.exit(err instanceof AdminTokenError ? EXIT_CONFIG : 1)
    }
  }
  const app = buildApp({ ...config, databaseUrl: url }, { logger: log, adminToken })
  let stoppingSince: number | null = null
  const shutdown = async (signal: string) => {
    if (stoppingSince !== null) {
      // Ctrl-C under `npm start` arrives twice at once: from the terminal and
      // forwarded by npm. Only a later repeat means "stop waiting".
      if (Date.now() - stoppingSince < REPEAT_SIGNAL_MS) return
      console.error(`showrunner: ${signal} again; exiting without waiting`)
      process.exit(1)
    }
    stoppingSince = Date.now()
    log.info({ signal }, 'shutting down: finishing the current step and releasing claims')
    let code = 0
    try {
      await app.stop()
    } catch (err) {
      code = 1
      log.error({ err }, 'error while stopping the server')
    }
    if (privateDb) {
      try {
        await privateDb.stop()
      } catch (err) {
        code = 1
        log.error({ err }, 'error while stopping the private MariaDB')
      }
    }
    flushThenExit(log, code)
  }
  process.on('SIGINT', () => void shutdown('SIGINT'))
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  installLastResortHandlers({
    logger: log,
    stop: async () => {
      await app.stop()
      await privateDb?.stop()
    },
  })

  let started: Awaited<ReturnType<typeof app.start>>
  try {
    started = await app.start()
  } catch (err) {
    log.error({ err }, 'the server could not start')
    console.error(`showrunner: the server could not start: ${(err as Error).message}`)
    await privateDb?.stop().catch(() => undefined)
    process.exit(1)
  }
  // The demo is loaded on the private database (a first run), or when asked.
  if (privateDb || opts.demo) {
    const created = await loadDemo({
      db: app.db,
      registry: app.registry,
      clock: systemClock,
      nudgeMaterialise: () => app.runner?.requestMaterialise(),
    })
    if (created.length > 0) log.info({ created }, 'loaded demo definitions')
  }
  const lines = [
    '',
    `showrunner is serving on ${started.url}`,
    `  GraphQL + GraphiQL: ${started.url}/graphql`,
    `  health:             ${started.url}/healthz  ${started.url}/readyz  ${started.url}/metrics`,
    `  runner:             ${config.runner === 'on' ? `on (tick ${config.tickMs} ms)` : 'off (API only)'}`,
    `  database:           ${privateDb ? `private MariaDB in ${opts.dataDir}` : 'DATABASE_URL'}`,
    '',
  ]
  console.log(lines.join('\n'))
}

async function withDatabase<T>(
  dataDir: string,
  command: string,
  fn: (url: string, log: Logger) => Promise<T>,
): Promise<T> {
  const config = configOrExit()
  const log = createLogger({ level: config.logLevel, instance: config.instanceId })
  const { url, privateDb } = await resolveDatabase(config, log, dataDir, command)
  try {
    return await fn(url, log)
  } finally {
    await privateDb?.stop()
  }
}

/** `migrate`: apply pending migrations and exit. */
export async function migrateCommand(opts: { dataDir: string }): Promise<void> {
  await withDatabase(opts.dataDir, 'migrate', async (url) => {
    const db = createDb(url)
    try {
      const result = await migrate(db)
      console.log(
        result.applied.length > 0
          ? `applied: ${result.applied.join(', ')}`
          : `already current (${result.current.length} migrations)`,
      )
    } finally {
      await db.close()
    }
  })
}

/** `demo`: load the demo definitions (idempotent) and exit. */
export async function demoCommand(opts: { dataDir: string }): Promise<void> {
  await withDatabase(opts.dataDir, 'demo', async (url) => {
    const db = createDb(url)
    try {
      await migrate(db)
      const created = await loadDemo({ db, registry: createDefaultRegistry(), clock: systemClock })
      console.log(
        created.length > 0 ? `created: ${created.join(', ')}` : 'the demo definitions already exist',
      )
    } finally {
      await db.close()
    }
  })
}

/** `token`: a new random token for SHOWRUNNER_TOKENS. */
export function printToken(): void {
  console.log(generateToken())
}
