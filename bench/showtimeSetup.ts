/**
 * Set-up shared by bench/showtime.ts and its stress phases: definitions made
 * over GraphQL, bounded waits, run counts, and the clients' process.
 */
import { type ChildProcess, fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { sleep } from './lib.ts'
import { graphql } from './scheduled.ts'
import type { BenchServer } from './server.ts'
import type { Command } from './showtimeClients.ts'

/** No phase may take longer than this: the benchmark fails rather than waits for ever. */
export const PHASE_TIMEOUT_MS = 300_000

const CREATE = `mutation Create($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`

/** `shows` runs of `program` due at `instant` (or on `schedule`), `perDefinition` scopes a definition. */
export async function createShows(
  server: BenchServer,
  opts: {
    prefix: string
    shows: number
    perDefinition: number
    schedule: string
    /** The program, or the program of definition number d. */
    program: unknown | ((d: number) => unknown)
  },
): Promise<{ from: number; to: number }> {
  const ids: number[] = []
  for (let d = 0, left = opts.shows; left > 0; d++, left -= opts.perDefinition) {
    const n = Math.min(opts.perDefinition, left)
    const data = await graphql<{ createDefinition: { id: string } }>(server.graphqlUrl, CREATE, {
      input: {
        slug: `${opts.prefix}${d}`,
        title: `Showtime ${opts.prefix}${d}`,
        schedule: opts.schedule,
        timezone: 'UTC',
        graceSeconds: 3600,
        ...(n > 1
          ? { scopes: Array.from({ length: n }, (_, i) => `room-${d * opts.perDefinition + i}`) }
          : {}),
        program: typeof opts.program === 'function' ? opts.program(d) : opts.program,
      },
    })
    ids.push(Number(data.createDefinition.id))
  }
  return { from: Math.min(...ids), to: Math.max(...ids) }
}

export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const got = await probe()
    if (got !== null) return got
    if (Date.now() > deadline) throw new Error(`showtime: ${what} not within ${timeoutMs} ms`)
    await sleep(50)
  }
}

export const countRuns = async (
  db: BenchServer['app']['db'],
  defs: { from: number; to: number },
  extra = '',
) => {
  const [row] = await db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id BETWEEN ? AND ? ${extra}`,
    [defs.from, defs.to],
  )
  return Number(row?.n ?? 0)
}

export class ClientsProcess {
  readonly child: ChildProcess
  constructor() {
    this.child = fork(fileURLToPath(new URL('./showtimeClients.ts', import.meta.url)), [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
  }
  next<T>(type: string, timeoutMs = 120_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.child.off('message', on)
        reject(new Error(`showtime clients: no "${type}" within ${timeoutMs} ms`))
      }, timeoutMs)
      const on = (msg: { type?: string; error?: string }) => {
        if (msg?.type !== type && msg?.type !== 'failed') return
        clearTimeout(timer)
        this.child.off('message', on)
        if (msg.type === 'failed') reject(new Error(`showtime clients failed: ${msg.error}`))
        else resolve(msg as T)
      }
      this.child.on('message', on)
    })
  }
  ask<T>(cmd: Command, reply: string, timeoutMs?: number): Promise<T> {
    const answer = this.next<T>(reply, timeoutMs)
    this.child.send(cmd)
    return answer
  }
}
