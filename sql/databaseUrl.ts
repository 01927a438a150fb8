/**
 * `DATABASE_URL`: one server, a unix socket, or several nodes of one Galera
 * cluster, parsed and validated, and turned into mysql2 pool options.
 */
import type { PoolOptions } from 'mysql2/promise'

/** Where a database URL points: one server, or several nodes of one Galera cluster. */
export interface DatabaseTarget {
  /** In the order given; the first is tried first. Empty when `socketPath` is set. */
  hosts: { host: string; port: number }[]
  socketPath: string | undefined
  user: string
  password: string
  database: string | undefined
}

const URL_SHAPE =
  'expected mysql://user:pass@host:port/db, or mysql://user:pass@host1:port,host2:port/db for several nodes of one cluster'

/**
 * Parse `mysql://user:pass@host:port/db`. The host part may list several nodes
 * of one cluster, comma-separated (`host1:3306,host2:3306`), which a standard URL
 * parser refuses; each is parsed on its own. A `socket` query parameter
 * (`?socket=/path/to/mysqld.sock`) selects a unix socket instead of TCP.
 * Messages never repeat the password.
 */
export function parseDatabaseUrl(url: string): DatabaseTarget {
  const schemeEnd = url.indexOf('://')
  if (schemeEnd < 0) throw new Error(`The database URL is not a valid URL; ${URL_SHAPE}.`)
  // The host list: after the last '@' of the part before any '?' or '#', up to the path.
  const rest = url.slice(schemeEnd + 3)
  const qAt = rest.search(/[?#]/)
  const head = qAt < 0 ? rest : rest.slice(0, qAt)
  const hostsStart = head.lastIndexOf('@') + 1
  const slash = head.indexOf('/', hostsStart)
  const hostsEnd = slash < 0 ? head.length : slash
  const hostList = head.slice(hostsStart, hostsEnd).split(',')
  let u: URL
  try {
    // The same URL with only the first host, for everything but the hosts.
    u = new URL(url.slice(0, schemeEnd + 3) + rest.slice(0, hostsStart) + hostList[0] + rest.slice(hostsEnd))
  } catch (err) {
    throw new Error(`The database URL is not a valid URL; ${URL_SHAPE}.`, { cause: err })
  }
  if (u.protocol !== 'mysql:' && u.protocol !== 'mariadb:') {
    throw new Error(`The database URL must start with mysql:// (got ${u.protocol}//).`)
  }
  const socketPath = u.searchParams.get('socket') ?? undefined
  if (socketPath && hostList.length > 1) {
    throw new Error('The database URL names several hosts and a unix socket; use one or the other.')
  }
  const hosts = hostList.map((entry, i) => {
    if (entry.trim() === '' && hostList.length > 1) {
      throw new Error(`The database URL's host list has an empty entry (number ${i + 1}); ${URL_SHAPE}.`)
    }
    let h: URL
    try {
      h = new URL(`mysql://${entry.trim()}`)
    } catch (err) {
      throw new Error(`The database URL's host ${JSON.stringify(entry)} is not host or host:port.`, {
        cause: err,
      })
    }
    return { host: h.hostname || '127.0.0.1', port: Number(h.port || 3306) }
  })
  const seen = new Set(hosts.map((h) => `${h.host}:${h.port}`))
  if (seen.size !== hosts.length) throw new Error('The database URL names the same host:port twice.')
  return {
    hosts: socketPath ? [] : hosts,
    socketPath,
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password || ''),
    database: decodeURIComponent(u.pathname.replace(/^\//, '')) || undefined,
  }
}

/** The URL with its password replaced by `***`, for logs. */
export function redactDatabaseUrl(url: string): string {
  const schemeEnd = url.indexOf('://')
  if (schemeEnd < 0) return '(invalid URL)'
  const rest = url.slice(schemeEnd + 3)
  const qAt = rest.search(/[?#]/)
  const head = qAt < 0 ? rest : rest.slice(0, qAt)
  const at = head.lastIndexOf('@')
  if (at < 0) return url
  const colon = head.slice(0, at).indexOf(':')
  if (colon < 0) return url
  return `${url.slice(0, schemeEnd + 3)}${head.slice(0, colon)}:***${rest.slice(at)}`
}

/** Options for `createDb` (sql/db.ts), read here into pool options. */
export interface DbOptions {
  /** Pool size. @default 10 */
  connectionLimit?: number
  /** Milliseconds to wait for a connection to open. @default 5000 */
  connectTimeout?: number
  /**
   * On a Galera node, make every read wait until the node has applied every
   * write the cluster committed before it (`wsrep_sync_wait = 1`), so an answer
   * reflects a write just made through another node. Ignored on a server that
   * is not a Galera node. @default true
   */
  causalReads?: boolean
  /**
   * Statements that may wait for a free connection; one more fails at once
   * with a "busy" error (`isPoolBusy` in sql/db.ts) instead of waiting behind them.
   * @default 0 (unbounded)
   */
  queueLimit?: number
}

/**
 * Pool options for one host of the URL (the first unless `hostIndex` says
 * otherwise); see {@link parseDatabaseUrl}.
 */
export function poolOptionsFromUrl(url: string, opts: DbOptions = {}, hostIndex = 0): PoolOptions {
  const t = parseDatabaseUrl(url)
  const host = t.hosts[hostIndex]
  return {
    host: t.socketPath ? undefined : (host?.host ?? '127.0.0.1'),
    port: t.socketPath ? undefined : (host?.port ?? 3306),
    socketPath: t.socketPath,
    user: t.user,
    password: t.password,
    database: t.database,
    connectionLimit: opts.connectionLimit ?? 10,
    connectTimeout: opts.connectTimeout ?? 5000,
    // UTC end to end: mysql2 writes and reads DATETIME as UTC, and every session's
    // time_zone is pinned below so NOW(3) agrees.
    timezone: 'Z',
    dateStrings: false,
    supportBigNumbers: true,
    bigNumberStrings: false,
    decimalNumbers: true,
    waitForConnections: true,
    queueLimit: opts.queueLimit ?? 0,
    enableKeepAlive: true,
    // mysql2 otherwise captures a stack trace for every statement, to graft onto
    // a driver error; ours never reach a user, and the capture cost a tenth of
    // the API's CPU under load (bench/apiLatency.ts).
    trace: false,
    // Queryable.batch sends a transaction's last writes with its COMMIT in one
    // round trip. Values are still escaped by the driver, never spliced.
    multipleStatements: true,
    maxIdle: opts.connectionLimit ?? 10,
    idleTimeout: 60_000,
  }
}
