/**
 * Server-level statements used before a pool on the application database can
 * exist: probing a server that may still be starting, and creating the database
 * itself. Each opens one short-lived connection rather than a pool, because the
 * database the pool would name may not exist yet.
 */
import mysql, { type ConnectionOptions } from 'mysql2/promise'
import { isDbUnavailable, parseDatabaseUrl, poolOptionsFromUrl } from './db.ts'

/** Connection options from a server URL, without the pool-only settings mysql2 warns about. */
function connectionOptions(url: string, connectTimeout: number, hostIndex = 0): ConnectionOptions {
  const p = poolOptionsFromUrl(url, { connectTimeout }, hostIndex)
  return {
    host: p.host,
    port: p.port,
    socketPath: p.socketPath,
    user: p.user,
    password: p.password,
    database: p.database,
    connectTimeout,
  }
}

/**
 * Open one connection to the first host of `url` that answers (a URL may list
 * several nodes of one cluster); the last host's error when none does.
 */
async function connectAny(
  url: string,
  connectTimeout: number,
  withoutDatabase = false,
): Promise<mysql.Connection> {
  const hostCount = Math.max(1, parseDatabaseUrl(url).hosts.length)
  for (let i = 0; ; i++) {
    const opts = connectionOptions(url, connectTimeout, i)
    if (withoutDatabase) opts.database = undefined
    try {
      return await mysql.createConnection(opts)
    } catch (err) {
      if (i + 1 >= hostCount || !isDbUnavailable(err)) throw err
    }
  }
}

/**
 * Open and close one connection to the server at `url`.
 * @throws the driver's error (ENOENT, ECONNREFUSED, …) when the server does not answer.
 */
export async function probeServer(url: string, connectTimeoutMs = 2000): Promise<void> {
  const conn = await connectAny(url, connectTimeoutMs)
  try {
    await conn.ping()
  } finally {
    await conn.end().catch(() => {})
  }
}

/**
 * Create database `name` on the server at `url` (whose own database part is
 * ignored) unless it exists. Answers true when this call created it.
 */
export async function ensureDatabase(url: string, name: string): Promise<boolean> {
  // An identifier cannot be a bound parameter; accept only names that need no quoting rules.
  if (!/^[A-Za-z0-9_]{1,64}$/.test(name)) {
    throw new Error(`Database name ${JSON.stringify(name)} must be 1 to 64 letters, digits or underscores.`)
  }
  const conn = await connectAny(url, 5000, true)
  try {
    const [res] = await conn.query<mysql.ResultSetHeader>(
      `CREATE DATABASE IF NOT EXISTS \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
    )
    return res.affectedRows > 0
  } finally {
    await conn.end().catch(() => {})
  }
}
