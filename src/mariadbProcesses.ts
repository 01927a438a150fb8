/**
 * The process plumbing behind the private MariaDB: finding a mariadbd that
 * serves a data folder, telling a live owner from a reused pid, stopping a
 * server this process did not spawn, running the installer to a log, and
 * quoting a log's tail in an error a person can act on.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, existsSync, openSync, readdirSync, readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

/** Where `npm start` keeps its private server, relative to the working directory. */
export const DEFAULT_DIR = '.data/mariadb'
const HAS_PROC = process.platform === 'linux' && existsSync('/proc/self/stat')

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

export function cmdline(pid: number): string[] | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
  } catch {
    return undefined
  }
}

/** Linux: the process's start time in clock ticks since boot, which tells a live owner from a reused pid. */
export function startTimeOf(pid: number): string | undefined {
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
export function isAlive(pid: number): boolean {
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

export function readPid(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, 'utf8').trim())
    return Number.isSafeInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

export async function waitForDeath(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true
    await sleep(100)
  }
  return !isAlive(pid)
}

/** SIGTERM, wait, then SIGKILL: for a server this process did not spawn. */
export async function terminate(pid: number, graceMs: number): Promise<void> {
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
export async function tail(file: string, from = 0, lines = 20): Promise<string> {
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

export function quoteLog(file: string, text: string): string {
  return text ? `\nLast lines of ${file}:\n${text}` : `\n(${file} is empty or missing.)`
}

/** Run a program to completion, its output appended to `logFile`. */
export function runToLog(
  cmd: string,
  args: string[],
  logFile: string,
  timeoutMs: number,
): Promise<number | string> {
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
