/**
 * Child processes as a test sees them: their output, their descendants (by
 * pid, from /proc), and whether any of them is still alive. Used by the suites
 * that start the product the way a person or a process manager does.
 */
import type { ChildProcess } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

/** Parent pid and state of `pid` from /proc, or undefined when it is gone. */
function statOf(pid: number): { ppid: number; state: string } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
    return { state: fields[0] as string, ppid: Number(fields[1]) }
  } catch {
    return undefined
  }
}

/** True while `pid` exists and is not a zombie. */
export function isAlive(pid: number): boolean {
  const s = statOf(pid)
  return s !== undefined && s.state !== 'Z'
}

/** Every live descendant of `pid` (children, grandchildren, …). */
export function descendantsOf(pid: number): number[] {
  const parents = new Map<number, number>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const s = statOf(Number(entry))
    if (s && s.state !== 'Z') parents.set(Number(entry), s.ppid)
  }
  const found: number[] = []
  const queue = [pid]
  while (queue.length > 0) {
    const parent = queue.shift() as number
    for (const [child, ppid] of parents) {
      if (ppid === parent && !found.includes(child)) {
        found.push(child)
        queue.push(child)
      }
    }
  }
  return found
}

/** The command line of `pid`, joined with spaces ('' when gone). */
export function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim()
  } catch {
    return ''
  }
}

/** Wait until none of `pids` is alive; answers the ones still alive at the deadline. */
export async function waitForExit(pids: readonly number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const alive = pids.filter(isAlive)
    if (alive.length === 0 || Date.now() >= deadline) return alive
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** Everything a child wrote to stdout and stderr, as it arrives. */
export function captureOutput(proc: ChildProcess): { text: string } {
  const seen = { text: '' }
  proc.stdout?.on('data', (chunk: Buffer) => {
    seen.text += chunk.toString()
  })
  proc.stderr?.on('data', (chunk: Buffer) => {
    seen.text += chunk.toString()
  })
  return seen
}

/** Resolve with the first match of `pattern` in the captured output; reject on timeout or exit. */
export function waitForOutput(
  proc: ChildProcess,
  seen: { text: string },
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error, m?: RegExpMatchArray) => {
      clearInterval(poll)
      clearTimeout(timer)
      proc.off('exit', onExit)
      if (err) reject(err)
      else resolve(m as RegExpMatchArray)
    }
    const check = () => {
      const m = seen.text.match(pattern)
      if (m) done(undefined, m)
    }
    const onExit = (code: number | null) => {
      const m = seen.text.match(pattern)
      if (m) done(undefined, m)
      else done(new Error(`exited (${code}) before printing ${pattern}; output:\n${seen.text}`))
    }
    const poll = setInterval(check, 50)
    const timer = setTimeout(
      () => done(new Error(`timed out waiting for ${pattern}; output so far:\n${seen.text}`)),
      timeoutMs,
    )
    proc.once('exit', onExit)
    check()
  })
}
