import { spawn } from 'node:child_process'
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createDb } from '../sql/db.ts'
import { createLogger } from '../src/log.ts'
import {
  findMariadbBinaries,
  findMariadbdProcesses,
  MariadbNotInstalledError,
  type PrivateMariadb,
  PrivateMariadbError,
  startPrivateMariadb,
} from '../src/privateMariadb.ts'
import { captureLog } from './helpers/logCapture.ts'

const MODULE = fileURLToPath(new URL('../src/privateMariadb.ts', import.meta.url))

const installed = (() => {
  try {
    findMariadbBinaries()
    return true
  } catch (err) {
    console.log(`privateMariadb: skipping the server tests: ${(err as Error).message}`)
    return false
  }
})()

async function queryOne<T>(url: string, sql: string): Promise<T> {
  const db = createDb(url, { connectionLimit: 1 })
  try {
    return (await db.query<T & Record<string, unknown>>(sql))[0] as T
  } finally {
    await db.close()
  }
}

/** Start the private server in another Node process running `then` afterwards; answers its mariadbd pid. */
async function startInChild(dir: string, then: string, options = '{}') {
  const code = `
    const { startPrivateMariadb } = await import(${JSON.stringify(MODULE)})
    const m = await startPrivateMariadb({ dir: ${JSON.stringify(dir)}, ...${options} })
    console.log(JSON.stringify({ pid: m.pid }))
    ${then}
  `
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exit = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)))
  const pid = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (chunk) => {
      out += chunk
      const line = out.split('\n').find((l) => l.startsWith('{'))
      if (line) resolve(JSON.parse(line).pid)
    })
    child.once('exit', (c) => reject(new Error(`child exited with ${c} before starting: ${out}`)))
  })
  return { child, pid, exit }
}

async function eventually(check: () => boolean, ms = 10_000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (check()) return true
    await new Promise((r) => setTimeout(r, 50))
  }
  return check()
}

describe('findMariadbBinaries', () => {
  it('says what to install or set when MariaDB is not there', () => {
    let err: unknown
    try {
      findMariadbBinaries({ path: '/nonexistent', extraDirs: [] })
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(MariadbNotInstalledError)
    const message = (err as Error).message
    expect(message).toContain('mariadbd and mariadb-install-db was not found')
    expect(message).toContain('apt-get install mariadb-server')
    expect(message).toContain('DATABASE_URL=mysql://')
  })

  it.skipIf(!installed)('finds both programs, also outside PATH', () => {
    const bins = findMariadbBinaries({ path: '' })
    expect(bins.mariadbd).toMatch(/\/mariadbd$/)
    expect(bins.installDb).toMatch(/\/(mariadb-install-db|mysql_install_db)$/)
  })
})

describe.skipIf(!installed)('startPrivateMariadb', () => {
  let dir: string
  const started: PrivateMariadb[] = []
  const start = async (extra: Parameters<typeof startPrivateMariadb>[0] = {}) => {
    const m = await startPrivateMariadb({ dir, ...extra })
    started.push(m)
    return m
  }

  beforeAll(async () => {
    // Short: a unix socket path must stay under ~107 bytes.
    dir = await mkdtemp(join(tmpdir(), 'srdb-'))
  })
  afterAll(async () => {
    await Promise.allSettled(started.map((m) => m.stop()))
    for (const pid of findMariadbdProcesses(dir)) process.kill(pid, 'SIGKILL')
    await rm(dir, { recursive: true, force: true })
  })

  it('initialises, starts on a socket only, and creates the database', async () => {
    const m = await start()
    expect(m.url).toBe(`mysql://root@localhost/showrunner?socket=${dir}/mysqld.sock`)
    expect(m.socket).toBe(join(dir, 'mysqld.sock'))
    expect(findMariadbdProcesses(dir)).toEqual([m.pid])
    const row = await queryOne<{ db: string; net: number; port: number }>(
      m.url,
      'SELECT DATABASE() AS db, @@skip_networking AS net, @@port AS port',
    )
    expect(row).toEqual({ db: 'showrunner', net: 1, port: 0 })
    const db = createDb(m.url, { connectionLimit: 1 })
    await db.runQuery('CREATE TABLE kept (v INT)')
    await db.runQuery('INSERT INTO kept VALUES (42)')
    await db.close()
    expect((await readdir(dir)).sort()).toEqual(
      ['data', 'install.log', 'mariadbd.err', 'mariadbd.pid', 'mysqld.sock', 'owner.json'].sort(),
    )
  })

  it('refuses a second start on a dir whose server is in use', async () => {
    await expect(startPrivateMariadb({ dir })).rejects.toThrow(/already in use by this process/)
    expect(findMariadbdProcesses(dir)).toHaveLength(1)
  })

  it('stops, leaving no mariadbd for the dir, and restarts on the same data', async () => {
    const first = started.at(-1)!
    await first.stop()
    await first.stop() // idempotent
    expect(findMariadbdProcesses(dir)).toEqual([])
    expect(await readdir(dir)).not.toContain('owner.json')

    const again = await start()
    expect(again.pid).not.toBe(first.pid)
    expect(await queryOne<{ v: number }>(again.url, 'SELECT v FROM kept')).toEqual({ v: 42 })
    await again.stop()
    expect(findMariadbdProcesses(dir)).toEqual([])
  })

  it('stops and replaces a server left running by a process that was killed', async () => {
    // A separate Node process starts the server, reports, and is SIGKILLed: no
    // exit hook runs, so its mariadbd (in its own process group) is orphaned.
    const { child, pid: orphan, exit } = await startInChild(dir, 'setInterval(() => {}, 1000)')
    child.kill('SIGKILL')
    await exit
    expect(findMariadbdProcesses(dir)).toEqual([orphan])

    const fresh = await start()
    expect(fresh.pid).not.toBe(orphan)
    expect(findMariadbdProcesses(dir)).toEqual([fresh.pid])
    expect(await queryOne<{ v: number }>(fresh.url, 'SELECT v FROM kept')).toEqual({ v: 42 })
    await fresh.stop()
    expect(findMariadbdProcesses(dir)).toEqual([])
  })

  it('with stopOnSignals, stops the server on SIGTERM and exits 143', async () => {
    const { child, pid, exit } = await startInChild(
      dir,
      'setInterval(() => {}, 1000)',
      '{ stopOnSignals: true }',
    )
    expect(findMariadbdProcesses(dir)).toEqual([pid])
    child.kill('SIGTERM')
    expect(await exit).toBe(143)
    expect(findMariadbdProcesses(dir)).toEqual([])
  })

  it('stops the server when the process exits without calling stop()', async () => {
    const { pid, exit } = await startInChild(dir, 'process.exit(0)')
    expect(await exit).toBe(0)
    // The exit hook only sends SIGTERM; the server then shuts down on its own.
    expect(await eventually(() => findMariadbdProcesses(dir).length === 0)).toBe(true)
    expect(findMariadbdProcesses(dir)).not.toContain(pid)
  })

  it('logs a server that dies after start-up, and stop() still resolves', async () => {
    const { lines, stream: destination } = captureLog()
    const m = await start({ log: createLogger({ destination }) })
    process.kill(m.pid, 'SIGKILL')
    expect(await eventually(() => lines.some((l) => l.msg === 'private MariaDB: exited unexpectedly'))).toBe(
      true,
    )
    await m.stop()
    expect(findMariadbdProcesses(dir)).toEqual([])
    // Crash recovery on the next start keeps the data.
    const again = await start()
    expect(await queryOne<{ v: number }>(again.url, 'SELECT v FROM kept')).toEqual({ v: 42 })
    await again.stop()
  })

  it('treats an owner file whose process is gone as stale', async () => {
    // Pid 2^22+1 is above Linux's default pid_max, so no process has it.
    await writeFile(join(dir, 'owner.json'), JSON.stringify({ pid: 4_194_305 }))
    const m = await start()
    await m.stop()
    expect(findMariadbdProcesses(dir)).toEqual([])
  })

  it('reports a server that dies at start-up with the tail of its log, leaving nothing behind', async () => {
    const err = await startPrivateMariadb({ dir, extraArgs: ['--no-such-option'] }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(PrivateMariadbError)
    expect((err as Error).message).toMatch(/exited during start-up/)
    expect((err as Error).message).toMatch(/Last lines of .*mariadbd\.err:[\s\S]*no-such-option/)
    expect(findMariadbdProcesses(dir)).toEqual([])
    // The failed attempt released the dir.
    const m = await start()
    await m.stop()
  })

  it('reports a server that does not answer in time, and stops it', async () => {
    // The last --socket wins: the server comes up listening where the probe never looks.
    const extraArgs = [`--socket=${join(dir, 'elsewhere.sock')}`]
    const err = await startPrivateMariadb({ dir, extraArgs, readyTimeoutMs: 1500 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(PrivateMariadbError)
    expect((err as Error).message).toMatch(
      /did not accept connections on .*mysqld\.sock within 1\.5 s \(connect ENOENT/,
    )
    expect((err as Error).message).toMatch(/Last lines of .*mariadbd\.err:/)
    expect(findMariadbdProcesses(dir)).toEqual([])
  })

  it('refuses a directory whose socket path is too long', async () => {
    const long = join(tmpdir(), 'x'.repeat(120))
    await expect(startPrivateMariadb({ dir: long })).rejects.toThrow(
      /over the \d+-byte limit for unix sockets/,
    )
  })
})
