/**
 * Set-up shared by bench/showtime.ts and its stress phases: definitions made
 * over GraphQL, bounded waits, run counts, and the clients' process.
 */
import { type ChildProcess, fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Db } from '../sql/db.ts'
import { sleep } from './lib.ts'
import { BENCH_ADMIN_TOKEN, cronAt, graphql, instantAhead } from './scheduled.ts'
import { BENCH_TOKENS, type BenchServer } from './server.ts'
import { WAIT_MS } from './showtimeFigures.ts'
import type { Command } from './showtimeMessages.ts'

/** No phase may take longer than this: the benchmark fails rather than waits for ever. */
export const PHASE_TIMEOUT_MS = 300_000

export const SCOPES_PER_DEFINITION = 20
export const OPERATORS = 10
export const ANSWERS_IN_FLIGHT = 4
export const OPERATOR_TOKENS = Array.from(
  { length: OPERATORS },
  (_, i) => `bench-operator-${i}-token-0123456789abcdef`,
)
/** Operator i signs in as `op-i` and is the assignee of the cues of definitions numbered i mod 10. */
export const operatorName = (i: number) => `op-${i}`
/** SHOWRUNNER_TOKENS of every instance: the set-up's admin, the dashboards' viewer, the named operators. */
export const SHOW_TOKENS = [
  `admin:${BENCH_ADMIN_TOKEN}`,
  `viewer:${BENCH_TOKENS.viewer}`,
  ...OPERATOR_TOKENS.map((tok, i) => `operator:${operatorName(i)}=${tok}`),
].join(',')
/** Operators answer only the show's cues; group 1 is the definition's number (its owner: n mod 10). */
export const ANSWER_SLUG_PATTERN = '^(?:idle|show)-(\\d+)$'

export function showProgram(url: string, assignee: string) {
  const hook = (at: string) => ({
    kind: 'core.webhook',
    params: { url, method: 'POST', body: { room: '{{run.scope}}', at } },
  })
  return {
    phases: [
      {
        name: 'doors',
        steps: [{ kind: 'core.log', params: { message: 'doors open in {{run.scope}}' } }, hook('doors')],
      },
      {
        name: 'show',
        steps: [
          { kind: 'core.cue', params: { prompt: 'Curtain up in {{run.scope}}', assignee } },
          { kind: 'core.wait', params: { seconds: WAIT_MS / 1000 } },
          { kind: 'core.cue', params: { prompt: 'Curtain down in {{run.scope}}', assignee } },
          hook('curtain'),
        ],
      },
      {
        name: 'wrap-up',
        ending: true,
        steps: [{ kind: 'core.log', params: { message: 'wrap-up in {{run.scope}}' } }],
      },
    ],
  }
}

/**
 * `shows` runs of the show due at one instant `leadMs` ahead, made over
 * `api`'s GraphQL; answers once every run is materialised (the runner makes
 * them), before the instant.
 */
export async function scheduleShow(
  api: Pick<BenchServer, 'graphqlUrl'>,
  db: Db,
  opts: { prefix: string; shows: number; leadMs: number; receiverUrl: string },
): Promise<{ instant: Date; defs: { from: number; to: number } }> {
  const instant = instantAhead(opts.leadMs)
  const defs = await createShows(api, {
    prefix: opts.prefix,
    shows: opts.shows,
    perDefinition: SCOPES_PER_DEFINITION,
    schedule: cronAt(instant),
    program: (d: number) => showProgram(opts.receiverUrl, operatorName(d % OPERATORS)),
  })
  await until(
    `${opts.shows} runs materialised`,
    Math.max(0, instant.getTime() - Date.now() - 500),
    async () => ((await countRuns(db, defs)) >= opts.shows ? true : null),
  ).catch((err) => {
    throw new Error(`${(err as Error).message}; raise BENCH_LEAD_MS`)
  })
  return { instant, defs }
}

/** Until no show of `defs` is unfinished; past PHASE_TIMEOUT_MS, throws saying where they stand. */
export async function awaitShowFinished(db: Db, defs: { from: number; to: number }, shows: number) {
  await until(`${shows} shows finished`, PHASE_TIMEOUT_MS, async () =>
    (await countRuns(db, defs, `AND status IN ('scheduled','starting','running','paused','ending')`)) === 0
      ? true
      : null,
  ).catch(async (err) => {
    // Say where the unfinished shows stand, so a timeout can be diagnosed.
    const stuck = await db.query<{ status: string; kind: string; stepStatus: string; n: number }>(
      `SELECT r.status, s.kind, s.status AS stepStatus, COUNT(*) AS n
         FROM event_runs r JOIN event_run_steps s ON s.run_id = r.id
        WHERE r.definition_id BETWEEN ? AND ? AND r.status NOT IN ('completed','failed','cancelled','missed')
          AND s.status IN ('running','pending') AND s.seq = (SELECT MIN(seq) FROM event_run_steps x
            WHERE x.run_id = r.id AND x.status IN ('running','pending'))
        GROUP BY 1, 2, 3`,
      [defs.from, defs.to],
    )
    // The first few in detail: parked or not, who holds the run, and what the run's log says of answers.
    const detail = await db.query<Record<string, unknown>>(
      `SELECT r.id AS runId, r.claimed_by AS runClaimedBy, r.claim_expires_at AS runClaimExpires, r.wake_at AS runWakeAt,
              s.id AS stepId, s.seq, s.parked, s.started_at AS stepStartedAt, s.claimed_by AS stepClaimedBy,
              (SELECT GROUP_CONCAT(l.message ORDER BY l.id SEPARATOR ' | ') FROM event_run_logs l
                WHERE l.run_id = r.id AND l.step_id = s.id) AS lines
         FROM event_runs r JOIN event_run_steps s ON s.run_id = r.id
        WHERE r.definition_id BETWEEN ? AND ? AND r.status NOT IN ('completed','failed','cancelled','missed')
          AND s.status IN ('running','pending') ORDER BY r.id, s.seq LIMIT 5`,
      [defs.from, defs.to],
    )
    // The inbox reads waiting cues through an index on a virtual column: does it
    // hold what the table holds? A cue missing from it is never shown to anyone.
    const [viaIndex] = await db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_run_steps FORCE INDEX (idx_evstep_waiting_since) WHERE waiting_since IS NOT NULL`,
    )
    const [viaTable] = await db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_run_steps IGNORE INDEX (idx_evstep_waiting_since) WHERE parked = 1 AND status = 'running'`,
    )
    throw new Error(
      `${(err as Error).message}; unfinished, by current step: ${JSON.stringify(stuck)}; the first: ${JSON.stringify(detail)}; waiting cues via the inbox index ${viaIndex?.n}, via the table ${viaTable?.n}`,
    )
  })
}

const CREATE = `mutation Create($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`

/** `shows` runs of `program` due at `instant` (or on `schedule`), `perDefinition` scopes a definition. */
export async function createShows(
  server: Pick<BenchServer, 'graphqlUrl'>,
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

export const countRuns = async (db: Db, defs: { from: number; to: number }, extra = '') => {
  const [row] = await db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id BETWEEN ? AND ? ${extra}`,
    [defs.from, defs.to],
  )
  return Number(row?.n ?? 0)
}

/** A child process driven over IPC: a command sent, the reply of a given type awaited. */
export class IpcChild<C> {
  readonly child: ChildProcess
  /** `file` is a sibling of this one; `nodeFlags` go before tsx's loader. */
  constructor(
    file: string,
    private readonly what: string,
    nodeFlags: readonly string[] = [],
  ) {
    this.child = fork(fileURLToPath(new URL(file, import.meta.url)), [], {
      execArgv: [...nodeFlags, '--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
  }
  next<T>(type: string, timeoutMs = 120_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.child.off('message', on)
        reject(new Error(`${this.what}: no "${type}" within ${timeoutMs} ms`))
      }, timeoutMs)
      const on = (msg: { type?: string; error?: string }) => {
        if (msg?.type !== type && msg?.type !== 'failed') return
        clearTimeout(timer)
        this.child.off('message', on)
        if (msg.type === 'failed') reject(new Error(`${this.what} failed: ${msg.error}`))
        else resolve(msg as T)
      }
      this.child.on('message', on)
    })
  }
  ask<T>(cmd: C, reply: string, timeoutMs?: number): Promise<T> {
    const answer = this.next<T>(reply, timeoutMs)
    this.child.send(cmd as object)
    return answer
  }
}

/** The clients of bench/showtimeClients.ts (receiver, operators, dashboards, probers). */
export class ClientsProcess extends IpcChild<Command> {
  constructor() {
    super('./showtimeClients.ts', 'showtime clients')
  }
}
