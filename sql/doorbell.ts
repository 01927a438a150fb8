/**
 * A runner's doorbell, in SQL. MariaDB has no LISTEN/NOTIFY, so a runner
 * waits between passes in `SELECT SLEEP(n)` on a connection of its own, and
 * another instance wakes it with `KILL QUERY <that connection>`: the sleep
 * ends at once with error 1317 and the connection stays open. A user may
 * kill its own connections' statements without any privilege.
 *
 * Connection ids belong to a server: the same number on another Galera node
 * is somebody else's connection. So a doorbell is addressed by its server
 * (`@@hostname:@@port`, as its own connection sees it), and a ringer rings
 * only the doorbells on the server its own connection reaches
 * ({@link ringOnServer} checks on the connection that rings).
 *
 * Connection ids also belong to a server's lifetime: after a restart it counts
 * from 1 again, and an address listed before it (kept for up to a lease) may
 * name a stranger's connection, a runner's transaction or another program's
 * query. So a ring kills only a statement that is a doorbell's sleep, marked
 * with {@link DOORBELL_MARK} and seen in the server's process list on the
 * ringing connection; a stranger's statement is never interrupted. Between
 * the look and the kill the connection can only go on to its next sleep: a
 * doorbell's connection runs nothing else.
 */
import type { Connection, PoolConnection } from 'mysql2/promise'
import { DatabaseError, DB_ERRNO, type Db, isDbErrno } from './db.ts'

/** How long a goodbye may take before the connection is simply dropped. */
const END_TIMEOUT_MS = 1000
/** How a connection names its server; the same expression on both sides. */
const SERVER_IDENTITY = "CONCAT(@@hostname, ':', @@port)"
/** Ends every doorbell sleep's text, so a ringer can tell a doorbell from a stranger. */
export const DOORBELL_MARK = '/* showrunner doorbell */'
/** The process list's view of a doorbell asleep: its statement's text, as sent. */
const SLEEPING_LIKE = `SELECT SLEEP(%) ${DOORBELL_MARK}`

/** The runner's side: one connection that sleeps until it is rung or its time is up. */
export interface DoorbellConnection {
  readonly connectionId: number
  readonly server: string
  /** Sleep up to `seconds`: true when rung, false when the time ran out. Throws if the connection fails. */
  wait(seconds: number): Promise<boolean>
  /**
   * Close it. A sleep under way goes on on the server (its client gone) until
   * its time is up: ring it first ({@link ringOnServer}) to end it now.
   */
  end(): Promise<void>
}

export async function openDoorbell(db: Db): Promise<DoorbellConnection> {
  const conn: Connection = await db.openConnection()
  try {
    const [rows] = await conn.query(`SELECT CONNECTION_ID() AS id, ${SERVER_IDENTITY} AS server`)
    const row = (rows as Array<{ id: number | string; server: string }>)[0]
    if (!row) throw new Error('the server did not say which connection this is')
    return doorbellOn(conn, Number(row.id), String(row.server))
  } catch (err) {
    conn.destroy()
    throw err
  }
}

function doorbellOn(conn: Connection, connectionId: number, server: string): DoorbellConnection {
  return {
    connectionId,
    server,
    async wait(seconds) {
      try {
        await conn.query(`SELECT SLEEP(?) ${DOORBELL_MARK}`, [Math.max(0, seconds)])
        return false
      } catch (err) {
        if (isDbErrno(err, DB_ERRNO.QUERY_INTERRUPTED)) return true
        throw err
      }
    },
    async end() {
      // A broken connection may never answer the goodbye: destroyed after a second.
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), END_TIMEOUT_MS)
      })
      const ended = await Promise.race([conn.end().then(() => 'ended' as const), late]).catch(
        () => 'failed' as const,
      )
      clearTimeout(timer)
      if (ended !== 'ended') conn.destroy()
    },
  }
}

/**
 * Ring one doorbell: end its sleep if it is on the server `db` reaches now.
 * Answers `rung` (its sleep ended), `idle` (the connection is there but runs
 * no doorbell's sleep: a doorbell between two sleeps, or a stranger holding
 * the id after a restart; nothing interrupted), `elsewhere` (another server:
 * not ours to ring) or `gone` (no such connection there). Throws when the
 * server refuses. Each statement sent is counted on `db.stats` and, for a
 * caller that keeps its own count, on `sent`.
 */
export async function ringOnServer(
  db: Db,
  bell: { connectionId: number; server: string },
  sent?: { statements: number },
): Promise<'rung' | 'idle' | 'elsewhere' | 'gone'> {
  if (!Number.isSafeInteger(bell.connectionId) || bell.connectionId <= 0) return 'gone'
  // The server check and the ring on one connection: a failover between two
  // pooled statements could otherwise ring a stranger's connection on another node.
  let conn: PoolConnection
  try {
    conn = await db.pool.getConnection()
  } catch (err) {
    throw new DatabaseError('The database is unavailable (no connection to ring a runner on).', err)
  }
  const count = () => {
    db.stats.statements++
    if (sent) sent.statements++
  }
  try {
    count()
    // The ringer's own connection is left out: its statement holds the pattern's text.
    const [rows] = await conn.query(
      `SELECT ${SERVER_IDENTITY} = ? AS here,
              COUNT(p.ID) AS present,
              COALESCE(MAX(p.INFO LIKE ?), 0) AS asleep
         FROM (SELECT 1) AS one
         LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = ? AND p.ID <> CONNECTION_ID()`,
      [bell.server, SLEEPING_LIKE, bell.connectionId],
    )
    const seen = (rows as Array<{ here: unknown; present: unknown; asleep: unknown }>)[0]
    if (Number(seen?.here) !== 1) return 'elsewhere'
    if (Number(seen?.present) === 0) return 'gone'
    if (Number(seen?.asleep) !== 1) return 'idle'
    count()
    await conn.query(`KILL QUERY ${bell.connectionId}`)
    return 'rung'
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.NO_SUCH_THREAD)) return 'gone'
    throw new DatabaseError(
      `The database refused to ring a runner (${(err as { code?: string }).code ?? 'unknown error'}).`,
      err,
    )
  } finally {
    conn.release()
  }
}
