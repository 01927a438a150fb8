/**
 * A private MariaDB for `npm start` without DATABASE_URL: a newcomer needs
 * only the MariaDB server package, no running server and no configuration.
 *
 * Layout of `dir` (default `.data/mariadb`):
 *   data/          the data directory, made by mariadb-install-db on first run
 *   mysqld.sock    the only way in: the server listens on no TCP port
 *   mariadbd.pid   written by mariadbd
 *   mariadbd.err   mariadbd's error log (start-up failures are quoted from it)
 *   install.log    mariadb-install-db's output
 *   owner.json     the process that started the server, present while it runs
 *   admin-token    the admin token `serve` keeps when no tokens are configured (src/adminToken.ts)
 *
 * Decisions:
 * - The server runs in its own process group, so a Ctrl-C on the terminal reaches
 *   only Node. Shutdown order matters: the API server must release its claims
 *   while the database is still up, so the caller stops the database last by
 *   calling {@link PrivateMariadb.stop} (or passes `stopOnSignals` when it has
 *   nothing to drain). An `exit` hook sends SIGTERM to the server in case the
 *   process exits without calling stop().
 * - A server left running from the same dir by a process that died without
 *   stopping it (SIGKILL, crash) is stopped and a fresh one started rather than
 *   reused: restarting guarantees the flags below and gives this process a
 *   server it owns and may stop. A server whose starting process is still alive
 *   is never touched: start refuses, naming that process.
 * - The data directory is initialised under a temporary name and renamed into
 *   place, so an interrupted first run never leaves a half-made `data/`.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, existsSync, openSync, readdirSync, readFileSync, statSync, unlinkSync } from 'node:fs'
import { mkdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises'
import { delimiter, join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { ensureDatabase, probeServer } from '../sql/bootstrap.ts'
import { type Logger, silentLogger } from './log.ts'

/** Where `npm start` keeps its private server, relative to the working directory. */
export const DEFAULT_DIR = '.data/mariadb'

/** Longest unix socket path the kernel accepts (sun_path less its NUL). */
const MAX_SOCKET_PATH = process.platform === 'linux' ? 107 : 103
const HAS_PROC = process.platform === 'linux' && existsSync('/proc/self/stat')

export interface MariadbBinaries {
  mariadbd: string
  installDb: string
}

/** MariaDB is not installed where we look; the message says what to install or set. */
export class MariadbNotInstalledError extends Error {
  override readonly name = 'MariadbNotInstalledError'
}

/** The private server could not be started; the message quotes the tail of its log. */
export class PrivateMariadbError extends Error {
  override readonly name: string = 'PrivateMariadbError'
}

/** Another live process owns the folder; `url` reaches the server it runs, through its socket. */
export class PrivateMariadbInUseError extends PrivateMariadbError {
  override readonly name = 'PrivateMariadbInUseError'
  constructor(
    message: string,
    readonly ownerPid: number,
    readonly url: string,
  ) {
    super(message)
  }
}

/** Options for {@link startPrivateMariadb}. */
export interface PrivateMariadbOptions {
  /** Folder for data, socket, pid and logs; created when missing. @default '.data/mariadb' */
  dir?: string
  /** @default silentLogger() */
  log?: Logger
  /** Database created (if missing) and named in the URL. @default 'showrunner' */
  database?: string
  /** How long to wait for the server to accept connections. @default 30000 */
  readyTimeoutMs?: number
  /** How long stop() waits after SIGTERM before SIGKILL. @default 20000 */
  stopTimeoutMs?: number
  /**
   * Stop the server, then exit, on SIGINT/SIGTERM. Leave off when the caller has
   * its own shutdown (an API server must drain before its database goes) and
   * call stop() from it. @default false
   */
  stopOnSignals?: boolean
  /** Binaries to use instead of searching. @default findMariadbBinaries() */
  binaries?: MariadbBinaries
  /** Extra mariadbd options, appended last. @default [] */
  extraArgs?: string[]
}

export interface PrivateMariadb {
  /** `mysql://root@localhost/showrunner?socket=/abs/dir/mysqld.sock` */
  url: string
  /** mariadbd's process id. */
  pid: number
  /** Absolute path of the folder. */
  dir: string
  /** Absolute path of the unix socket. */
  socket: string
  /** Stop the server (SIGTERM, then SIGKILL after stopTimeoutMs) and wait for it to exit. Idempotent. */
  stop(): Promise<void>
}

const INSTALL_HINT =
  'Install MariaDB (Debian/Ubuntu: apt-get install mariadb-server; macOS: brew install mariadb), ' +
  'or set DATABASE_URL=mysql://user:pass@host:3306/showrunner to use an existing server.'

/**
 * Find `mariadbd` and `mariadb-install-db` on `path`, then in `extraDirs`
 * (Debian keeps mariadbd in /usr/sbin, which is often not on a user's PATH).
 * @throws {MariadbNotInstalledError} saying what to install or set.
 */
export function findMariadbBinaries(opts: { path?: string; extraDirs?: string[] } = {}): MariadbBinaries {
  const dirs = [
    ...(opts.path ?? process.env.PATH ?? '').split(delimiter).filter(Boolean),
    ...(opts.extraDirs ?? ['/usr/sbin', '/usr/bin']),
  ]
  const find = (names: string[]) => {
    for (const d of dirs) for (const n of names) if (isExecutableFile(join(d, n))) return join(d, n)
    return undefined
  }
  const mariadbd = find(['mariadbd'])
  const installDb = find(['mariadb-install-db', 'mysql_install_db'])
  if (!mariadbd || !installDb) {
    const missing = [!mariadbd && 'mariadbd', !installDb && 'mariadb-install-db']
      .filter(Boolean)
      .join(' and ')
    throw new MariadbNotInstalledError(
      `DATABASE_URL is not set and ${missing} was not found (looked in PATH, /usr/sbin and /usr/bin), ` +
        `so no private MariaDB can be started. ${INSTALL_HINT}`,
    )
  }
  return { mariadbd, installDb }
}

function isExecutableFile(p: string): boolean {
  try {
    const s = statSync(p)
    return s.isFile() && (s.mode & 0o111) !== 0
  } catch {
    return false
  }
}

/** Ids of running mariadbd processes whose data directory is `<dir>/data` (Linux; elsewhere the pid file). */
export function findMariadbdProcesses(dir: string = DEFAULT_DIR): number[] {
  const datadir = join(resolve(dir), 'data')
  if (!HAS_PROC) {
    const pid = readPid(join(resolve(dir), 'mariadbd.pid'))
    return pid !== undefined && isAlive(pid) ? [pid] : []
  }
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const pid = Number(entry)
    const args = cmdline(pid)
    if (args?.includes(`--datadir=${datadir}`) && isAlive(pid)) pids.push(pid)
  }
  return pids
}

function cmdline(pid: number): string[] | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
  } catch {
    return undefined
  }
}

/** Linux: the process's start time in clock ticks since boot, which tells a live owner from a reused pid. */
function startTimeOf(pid: number): string | undefined {
  if (!HAS_PROC) return undefined
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the parenthesised command name; starttime is field 22 overall.
    return text.slice(text.lastIndexOf(')') + 2).split(' ')[19]
  } catch {
    return undefined
  }
}

/** True when `pid` runs and is not a zombie (an unreaped zombie still answers kill 0). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  if (HAS_PROC) {
    try {
      const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
      return text.slice(text.lastIndexOf(')') + 2)[0] !== 'Z'
    } catch {
      return false
    }
  }
  return true
}

function readPid(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, 'utf8').trim())
    return Number.isSafeInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

async function waitForDeath(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true
    await sleep(100)
  }
  return !isAlive(pid)
}

/** SIGTERM, wait, then SIGKILL: for a server this process did not spawn. */
async function terminate(pid: number, graceMs: number): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM')
  } catch {
    return
  }
  if (await waitForDeath(pid, graceMs)) return
  try {
    process.kill(pid, 'SIGKILL')
  } catch {
    return
  }
  await waitForDeath(pid, 5000)
}

/** The last `lines` lines of `file` from byte `from`, or '' when it cannot be read. */
async function tail(file: string, from = 0, lines = 20): Promise<string> {
  try {
    const buf = await readFile(file)
    return buf
      .subarray(Math.min(from, buf.length))
      .toString('utf8')
      .trimEnd()
      .split('\n')
      .slice(-lines)
      .join('\n')
  } catch {
    return ''
  }
}

function quoteLog(file: string, text: string): string {
  return text ? `\nLast lines of ${file}:\n${text}` : `\n(${file} is empty or missing.)`
}

interface Owner {
  pid: number
  startTime?: string
}

function ownerAlive(o: Owner): boolean {
  if (!isAlive(o.pid)) return false
  // A different start time means the pid now belongs to an unrelated process.
  return o.startTime === undefined || startTimeOf(o.pid) === undefined || startTimeOf(o.pid) === o.startTime
}

/**
 * Take `owner.json` exclusively. A file left by a dead process is replaced; one
 * held by a live process (this one included) means the dir is in use.
 */
async function acquireOwner(file: string, dir: string, url: string): Promise<void> {
  const me: Owner = { pid: process.pid, startTime: startTimeOf(process.pid) }
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await writeFile(file, JSON.stringify(me), { flag: 'wx' })
      return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    let other: Owner | undefined
    try {
      other = JSON.parse(await readFile(file, 'utf8')) as Owner
    } catch {
      other = undefined // unreadable or half-written: treat as stale
    }
    if (other && typeof other.pid === 'number' && ownerAlive(other)) {
      const who = other.pid === process.pid ? 'this process' : `process ${other.pid}`
      throw new PrivateMariadbInUseError(
        `The private MariaDB in ${dir} is already in use by ${who}. Stop that first, ` +
          `use another directory, or share its server through its socket: DATABASE_URL='${url}'.`,
        other.pid,
        url,
      )
    }
    await rm(file, { force: true })
  }
  throw new PrivateMariadbError(`Could not take ${file}: another process keeps replacing it.`)
}

function socketUrl(socket: string, database: string): string {
  // '/' is legal in a query string; keep the path readable in logs.
  return `mysql://root@localhost/${database}?socket=${encodeURIComponent(socket).replace(/%2F/g, '/')}`
}

/** Run a program to completion, its output appended to `logFile`. */
function runToLog(cmd: string, args: string[], logFile: string, timeoutMs: number): Promise<number | string> {
  return new Promise((done) => {
    const fd = openSync(logFile, 'a')
    let child: ChildProcess
    try {
      child = spawn(cmd, args, { stdio: ['ignore', fd, fd] })
    } finally {
      closeSync(fd)
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('error', (err) => {
      clearTimeout(timer)
      done(err.message)
    })
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      done(code ?? `killed by ${signal}`)
    })
  })
}

/**
 * Start (initialising on first use) a MariaDB that listens only on a unix
 * socket in `dir`, wait until it answers, and make sure database `showrunner`
 * exists.
 * @throws {MariadbNotInstalledError} when the binaries are missing.
 * @throws {PrivateMariadbError} when the dir is in use or the server does not come up.
 */
export async function startPrivateMariadb(opts: PrivateMariadbOptions = {}): Promise<PrivateMariadb> {
  const log = opts.log ?? silentLogger()
  const bins = opts.binaries ?? findMariadbBinaries()
  const database = opts.database ?? 'showrunner'
  const readyTimeoutMs = opts.readyTimeoutMs ?? 30_000
  const stopTimeoutMs = opts.stopTimeoutMs ?? 20_000
  const dir = resolve(opts.dir ?? DEFAULT_DIR)
  const paths = {
    data: join(dir, 'data'),
    socket: join(dir, 'mysqld.sock'),
    pid: join(dir, 'mariadbd.pid'),
    err: join(dir, 'mariadbd.err'),
    install: join(dir, 'install.log'),
    owner: join(dir, 'owner.json'),
  }
  if (Buffer.byteLength(paths.socket) > MAX_SOCKET_PATH) {
    throw new PrivateMariadbError(
      `The socket path ${paths.socket} is ${Buffer.byteLength(paths.socket)} bytes, over the ` +
        `${MAX_SOCKET_PATH}-byte limit for unix sockets. Use a shorter directory or set DATABASE_URL.`,
    )
  }
  // Root logs in without a password over the socket, so folders made here admit
  // only their owner. An existing folder keeps its mode: it may be shared on purpose.
  await mkdir(dir, { recursive: true, mode: 0o700 })
  await acquireOwner(paths.owner, dir, socketUrl(paths.socket, database))
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0

  let child: ChildProcess | undefined
  let exited: Promise<void> = Promise.resolve()
  const childRunning = () => child !== undefined && child.exitCode === null && child.signalCode === null
  // process.kill is synchronous, so this still works inside an 'exit' handler.
  const onExit = () => {
    if (childRunning()) child?.kill('SIGTERM')
    try {
      unlinkSync(paths.owner)
    } catch {
      // already gone
    }
  }
  const onSignal = (signal: NodeJS.Signals) => {
    log.info({ signal }, 'private MariaDB: stopping on signal')
    void stop().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143))
  }
  let stopping: Promise<void> | undefined
  let ready = false
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (child?.pid !== undefined && childRunning()) {
        log.info({ pid: child.pid }, 'private MariaDB: stopping')
        child.kill('SIGTERM')
        const killed = await Promise.race([exited.then(() => false), sleep(stopTimeoutMs).then(() => true)])
        if (killed && childRunning()) {
          log.warn(
            { pid: child.pid, stopTimeoutMs },
            'private MariaDB: no exit after SIGTERM, sending SIGKILL',
          )
          child.kill('SIGKILL')
          await exited
        }
      }
      process.off('exit', onExit)
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
      await rm(paths.owner, { force: true })
    })()
    return stopping
  }

  try {
    // A server from this dir whose owner died (we hold owner.json, so nobody
    // live owns it): stop it so the one we start has our flags and is ours.
    for (const pid of findMariadbdProcesses(dir)) {
      log.warn({ pid, dir }, 'private MariaDB: stopping a server left running by an earlier process')
      await terminate(pid, stopTimeoutMs)
      if (isAlive(pid)) throw new PrivateMariadbError(`Could not stop the MariaDB left running (pid ${pid}).`)
    }
    await rm(paths.socket, { force: true })

    if (!existsSync(join(paths.data, 'mysql'))) await initialise(bins, dir, paths, asRoot, log)

    const args = [
      '--no-defaults', // ignore /etc/mysql/my.cnf: its socket, port and user are the system server's
      `--datadir=${paths.data}`,
      `--socket=${paths.socket}`,
      `--pid-file=${paths.pid}`,
      `--log-error=${paths.err}`,
      '--skip-networking',
      '--character-set-server=utf8mb4',
      '--collation-server=utf8mb4_unicode_ci',
      ...(asRoot ? ['--user=root'] : []), // mariadbd refuses to run as root unless told to
      ...(opts.extraArgs ?? []),
    ]
    const errFrom = await stat(paths.err).then(
      (s) => s.size,
      () => 0,
    )
    // Errors before mariadbd opens its log (a bad option) go to stderr: send them to the same file.
    const fd = openSync(paths.err, 'a')
    try {
      child = spawn(bins.mariadbd, args, { stdio: ['ignore', fd, fd], detached: true, cwd: dir })
    } finally {
      closeSync(fd)
    }
    const spawned = child
    exited = new Promise<void>((res) => {
      if (!childRunning()) res()
      spawned.once('exit', () => res())
    })
    let spawnError: Error | undefined
    spawned.once('error', (err) => {
      spawnError = err
    })
    spawned.once('exit', (code, signal) => {
      // After start-up, an exit nobody asked for leaves the API without a database: say so loudly.
      if (!stopping && ready)
        log.error({ code, signal, log: paths.err }, 'private MariaDB: exited unexpectedly')
    })
    // Neither the child nor its handles keep Node alive; the exit hook stops it.
    spawned.unref()
    process.on('exit', onExit)
    if (opts.stopOnSignals) {
      process.on('SIGINT', onSignal)
      process.on('SIGTERM', onSignal)
    }
    log.info({ dir, socket: paths.socket, pid: spawned.pid }, 'private MariaDB: starting')

    const url = socketUrl(paths.socket, database)
    const serverUrl = socketUrl(paths.socket, '')
    const deadline = Date.now() + readyTimeoutMs
    let lastError: unknown
    for (;;) {
      if (spawnError || !childRunning()) {
        const how = spawnError
          ? spawnError.message
          : `exit code ${spawned.exitCode ?? `signal ${spawned.signalCode}`}`
        throw new PrivateMariadbError(
          `The private MariaDB exited during start-up (${how}).` +
            quoteLog(paths.err, await tail(paths.err, errFrom)),
        )
      }
      try {
        await probeServer(serverUrl, 1000)
        break
      } catch (err) {
        lastError = err
      }
      if (Date.now() >= deadline) {
        throw new PrivateMariadbError(
          `The private MariaDB did not accept connections on ${paths.socket} within ${readyTimeoutMs / 1000} s ` +
            `(${(lastError as Error)?.message ?? 'no answer'}).` +
            quoteLog(paths.err, await tail(paths.err, errFrom)),
        )
      }
      await Promise.race([sleep(100), exited])
    }
    if (await ensureDatabase(serverUrl, database)) log.info({ database }, 'private MariaDB: created database')
    const pid = spawned.pid as number
    ready = true
    log.info({ pid, url }, 'private MariaDB: ready')
    return { url, pid, dir, socket: paths.socket, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

async function initialise(
  bins: MariadbBinaries,
  dir: string,
  paths: { data: string; install: string },
  asRoot: boolean,
  log: Logger,
): Promise<void> {
  // A data/ without mysql/ is either empty (remove it) or not ours (refuse to touch it).
  if (existsSync(paths.data)) {
    try {
      await rmdir(paths.data)
    } catch {
      throw new PrivateMariadbError(
        `${paths.data} exists but is not a MariaDB data directory; move it away or use another directory.`,
      )
    }
  }
  // Leftovers of interrupted first runs (we hold owner.json, so none is in progress).
  for (const e of readdirSync(dir))
    if (e.startsWith('data.init-')) await rm(join(dir, e), { recursive: true, force: true })
  const tmp = join(dir, `data.init-${process.pid}`)
  log.info({ datadir: paths.data }, 'private MariaDB: initialising the data directory (first run)')
  const from = await stat(paths.install).then(
    (s) => s.size,
    () => 0,
  )
  const result = await runToLog(
    bins.installDb,
    [
      '--no-defaults',
      `--datadir=${tmp}`,
      '--auth-root-authentication-method=normal', // root@localhost without password; reachable only through the socket
      '--skip-test-db',
      '--skip-name-resolve',
      ...(asRoot ? ['--user=root'] : []),
    ],
    paths.install,
    120_000,
  )
  if (result !== 0) {
    await rm(tmp, { recursive: true, force: true })
    // Its last lines are generic advice; the cause is in the [ERROR] lines above them.
    const output = await tail(paths.install, from, 400)
    const errors = output.split('\n').filter((line) => /\[ERROR\]|^ERROR/.test(line))
    throw new PrivateMariadbError(
      `mariadb-install-db failed (${typeof result === 'number' ? `exit code ${result}` : result}).` +
        quoteLog(
          paths.install,
          errors.length > 0 ? errors.slice(-10).join('\n') : output.split('\n').slice(-20).join('\n'),
        ),
    )
  }
  await rename(tmp, paths.data)
}
