/**
 * Shared pieces of the fault drills (`npm run drills`, config
 * `vitest.drills.config.ts`): real server processes (`node --import tsx
 * src/cli.ts serve`, exactly what `npm start` runs), a small GraphQL-over-HTTP
 * client, the concurrency-key sampler, and bounded waiting.
 *
 * Every loop here is bounded in count and in time; every child process is
 * killed when the test process exits, whatever happened.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { appendFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Db } from '../../sql/db.ts'

/** One token per role, as the API suites use (test/helpers/server.ts), without loading the server here. */
export const TOKENS = {
  viewer: 'drill-viewer-token-0123456789abcdef',
  operator: 'drill-operator-token-0123456789abcdef',
  admin: 'drill-admin-token-0123456789abcdef',
} as const
export const SHOWRUNNER_TOKENS = Object.entries(TOKENS)
  .map(([role, token]) => `${role}:${token}`)
  .join(',')

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url))
const CLI = join(REPO_ROOT, 'src', 'cli.ts')
const ORPHAN_GUARD = pathToFileURL(join(REPO_ROOT, 'test', 'drills', 'orphanGuard.ts')).href

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Every live child, killed on exit so a failed drill never leaves a server behind. */
const children = new Set<ChildProcess>()
process.once('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
})

/** A figure line the drills print, easy to grep out of CI output. */
export function report(drill: string, figures: Record<string, unknown>): void {
  console.log(`[drill:${drill}] ${JSON.stringify(figures)}`)
}

// ── Server processes ─────────────────────────────────────────────────────

export interface ExitInfo {
  code: number | null
  signal: NodeJS.Signals | null
}

export interface ServerProcess {
  name: string
  instanceId: string
  pid: number
  /** e.g. http://127.0.0.1:41234 */
  url: string
  child: ChildProcess
  exited: Promise<ExitInfo>
  alive(): boolean
  /** The last lines the process wrote (stdout and stderr together). */
  tail(lines?: number): string
  /** Log lines at level error or fatal (pino JSON), first 200 kept. */
  errorLines(): string[]
  /** The runner's slow-pass warnings (src/runner/passPhases.ts): where a late start's time went. */
  slowPassLines(): string[]
  /** SIGTERM, then SIGKILL after `graceMs`; answers how it ended. */
  stop(graceMs?: number): Promise<ExitInfo>
}

export interface SpawnOptions {
  name: string
  /** Environment for the server (config.ts names); PORT 0, HOST 127.0.0.1, LOG_LEVEL warn unless given. */
  env: Record<string, string>
  readyTimeoutMs?: number
}

/** Variables of the parent that must not leak into a server's configuration. */
const CONFIG_VARS = [
  'PORT',
  'HOST',
  'DATABASE_URL',
  'TICK_MS',
  'LEASE_MS',
  'RUNNER',
  'SHOWRUNNER_TOKENS',
  'WEBHOOK_ALLOW',
  'MAX_BODY_BYTES',
  'LOG_LEVEL',
  'LOG_RETENTION_DAYS',
  'RUN_RETENTION_DAYS',
  'STATUS_POLL_MS',
  'MATERIALIZE_HORIZON_HOURS',
  'INSTANCE_ID',
  'MAX_QUERY_DEPTH',
  'MAX_QUERY_COST',
  'MAX_QUERY_ALIASES',
  'MAX_QUERY_TOKENS',
  'MAX_OCCURRENCES_PER_REQUEST',
  'WS_MAX_SUBSCRIPTIONS',
  'WS_INIT_TIMEOUT_MS',
  'DB_POOL_SIZE',
  'DB_QUEUE_LIMIT',
  'RUNNER_DB_POOL_SIZE',
  'GRAPHQL_MAX_IN_FLIGHT',
  'GRAPHQL_MAX_QUEUED',
  'HTTP_ACCEPT_LISTENERS',
  'MAX_ANSWER_BYTES',
  'MAX_PARAMS_BYTES',
  'MAX_RUNS_PER_MINUTE',
  'AUDIT_RETENTION_DAYS',
]

/**
 * For profiling a drill's servers, never set in CI: DRILL_SERVER_FLAGS adds
 * node flags (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof --trace-gc`) and
 * DRILL_SERVER_OUT appends every line the servers print to that file.
 */
const DIAGNOSTIC_FLAGS = process.env.DRILL_SERVER_FLAGS?.split(' ').filter(Boolean) ?? []
const DIAGNOSTIC_OUT = process.env.DRILL_SERVER_OUT

/**
 * Start `node --no-memory-reducer --import tsx src/cli.ts serve`, what `npm
 * start` runs (with the orphan guard preloaded, see orphanGuard.ts), and wait
 * until it prints where it listens.
 */
export async function spawnServer(opts: SpawnOptions): Promise<ServerProcess> {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !CONFIG_VARS.includes(k)) env[k] = v
  Object.assign(env, { PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn' }, opts.env)
  const child = spawn(
    process.execPath,
    [...DIAGNOSTIC_FLAGS, '--no-memory-reducer', '--import', 'tsx', '--import', ORPHAN_GUARD, CLI, 'serve'],
    {
      cwd: REPO_ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  children.add(child)
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('exit', (code, signal) => {
      children.delete(child)
      resolve({ code, signal })
    })
  })
  const ring: string[] = []
  const errors: string[] = []
  const slowPasses: string[] = []
  let partial = ''
  let onUrl: ((url: string) => void) | null = null
  const take = (chunk: Buffer) => {
    partial += chunk.toString('utf8')
    const lines = partial.split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      if (DIAGNOSTIC_OUT) appendFileSync(DIAGNOSTIC_OUT, `${line}\n`)
      ring.push(line)
      if (ring.length > 400) ring.shift()
      if (errors.length < 200 && /"level":"(error|fatal)"/.test(line)) errors.push(line)
      if (slowPasses.length < 50 && /outlasted a tick/.test(line)) slowPasses.push(line)
      const m = /showrunner is serving on (http:\/\/\S+)/.exec(line)
      if (m && onUrl) onUrl(m[1] as string)
    }
  }
  // Both pipes are always drained: a full pipe would stall the server.
  child.stdout?.on('data', take)
  child.stderr?.on('data', take)
  const alive = () => child.exitCode === null && child.signalCode === null
  const tail = (n = 40) => ring.slice(-n).join('\n')
  const timeoutMs = opts.readyTimeoutMs ?? 30_000
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`${opts.name} did not start within ${timeoutMs} ms:\n${tail()}`))
    }, timeoutMs)
    onUrl = (u) => {
      clearTimeout(timer)
      resolve(u)
    }
    void exited.then((e) => {
      clearTimeout(timer)
      reject(new Error(`${opts.name} exited during start-up (${JSON.stringify(e)}):\n${tail()}`))
    })
  })
  return {
    name: opts.name,
    instanceId: env.INSTANCE_ID ?? opts.name,
    pid: child.pid as number,
    url,
    child,
    exited,
    alive,
    tail,
    errorLines: () => [...errors],
    slowPassLines: () => [...slowPasses],
    async stop(graceMs = 15_000) {
      if (!alive()) return exited
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
      const e = await exited
      clearTimeout(timer)
      return e
    },
  }
}

// ── GraphQL over HTTP ────────────────────────────────────────────────────

export interface GqlError {
  message: string
  path?: (string | number)[]
  extensions?: Record<string, unknown>
}

export interface GqlAnswer<T = Record<string, unknown>> {
  /** HTTP status; 0 when the request itself failed (connection refused, timeout). */
  status: number
  body: { data?: T | null; errors?: GqlError[] } | null
  /** The raw text when the body was not JSON (or the transport error). */
  text: string
  ms: number
}

/** POST one GraphQL request as JSON; never throws. */
export async function postGql<T = Record<string, unknown>>(
  baseUrl: string,
  payload: string | { query: string; variables?: unknown },
  opts: { token?: string; timeoutMs?: number } = {},
): Promise<GqlAnswer<T>> {
  const started = Date.now()
  const body = typeof payload === 'string' ? payload : JSON.stringify(payload)
  try {
    const res = await fetch(`${baseUrl}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/graphql-response+json, application/json',
        authorization: `Bearer ${opts.token ?? TOKENS.admin}`,
      },
      body,
      signal: AbortSignal.timeout(opts.timeoutMs ?? 15_000),
    })
    const text = await res.text()
    let parsed: GqlAnswer<T>['body'] = null
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = null
    }
    return {
      status: res.status,
      body: parsed,
      text: parsed ? '' : text.slice(0, 500),
      ms: Date.now() - started,
    }
  } catch (err) {
    return { status: 0, body: null, text: String((err as Error).message), ms: Date.now() - started }
  }
}

/** The error codes in an answer (`extensions.code`, or NO_CODE). */
export function codesOf(a: GqlAnswer<unknown>): string[] {
  return (a.body?.errors ?? []).map((e) => String(e.extensions?.code ?? 'NO_CODE'))
}

/** GET a probe (`/healthz`, `/readyz`); status 0 when it could not be reached. */
export async function probe(baseUrl: string, path: string, timeoutMs = 5000): Promise<number> {
  try {
    const res = await fetch(`${baseUrl}${path}`, { signal: AbortSignal.timeout(timeoutMs) })
    await res.arrayBuffer()
    return res.status
  } catch {
    return 0
  }
}

/**
 * What must never reach a client: SQL text (`SELECT `, `INSERT `, `UPDATE `,
 * ` WHERE `), driver error codes (`ER_…`), stack frames, file paths (`/work/`,
 * `.ts:`). Answers one line per offending error.
 *
 * Hostile input is echoed back on purpose ("schedule: \"'; SELECT …\" has 4
 * fields"), always inside double quotes, so quoted spans of a message are
 * skipped; everything else in the error (its extensions included) is checked
 * whole, and extensions may carry nothing but `code`, a manifest's `problems`
 * (each a path and a message), RATE_LIMITED's `retryAfterSeconds` and a
 * CONFLICT's `reason` (one of a documented set of SCREAMING_SNAKE words).
 */
export function leaks(a: GqlAnswer<unknown>): string[] {
  const found: string[] = []
  const check = (what: string, text: string, full: string) => {
    const hits = LEAK_PATTERNS.filter(([, re]) => re.test(text)).map(([name]) => name)
    if (hits.length > 0) found.push(`${what} ${hits.join(',')}: ${full.slice(0, 400)}`)
  }
  for (const e of a.body?.errors ?? []) {
    const full = JSON.stringify(e)
    check('message', unquoted(String(e.message ?? '')), full)
    const {
      message: _m,
      locations: _l,
      path: _p,
      extensions,
      ...rest
    } = e as GqlError & { locations?: unknown }
    if (Object.keys(rest).length > 0)
      found.push(`unexpected error fields ${Object.keys(rest).join(',')}: ${full.slice(0, 400)}`)
    const { code, problems, retryAfterSeconds, reason, ...extra } = (extensions ?? {}) as Record<
      string,
      unknown
    >
    if (Object.keys(extra).length > 0)
      found.push(`unexpected extensions ${Object.keys(extra).join(',')}: ${full.slice(0, 400)}`)
    check('extensions', JSON.stringify({ code }), full)
    // A manifest's problems (applyDefinitions) each name a path and say what is wrong, echoing
    // the caller's values in double quotes like a message does.
    if (problems !== undefined) {
      if (!Array.isArray(problems)) found.push(`problems not a list: ${full.slice(0, 400)}`)
      else
        for (const p of problems as { path?: unknown; message?: unknown }[]) {
          if (typeof p?.path !== 'string' || typeof p?.message !== 'string')
            found.push(`a problem without a path and message: ${full.slice(0, 400)}`)
          else check('problem', `${p.path} ${unquoted(p.message)}`, full)
        }
    }
    // retryStepNow's CONFLICT names why (NOT_IN_BACKOFF, RUN_NOT_RUNNING): a fixed word, never input.
    if (reason !== undefined && !(typeof reason === 'string' && /^[A-Z][A-Z_]{2,40}$/.test(reason)))
      found.push(`reason not a fixed word: ${full.slice(0, 400)}`)
    // RATE_LIMITED says when to retry, in whole seconds.
    if (
      retryAfterSeconds !== undefined &&
      !(Number.isInteger(retryAfterSeconds) && (retryAfterSeconds as number) > 0)
    )
      found.push(`retryAfterSeconds not a positive whole number: ${full.slice(0, 400)}`)
  }
  if (!a.body && a.text) check('body', a.text, a.text)
  return found
}

/**
 * The message without its double-quoted spans (echoes of the caller's own
 * values). A long echo is cut short by the server, which can leave a quote
 * open: from there on it is all echo.
 */
function unquoted(message: string): string {
  const closed = message.replace(/"(?:[^"\\]|\\.)*"/g, '""')
  const open = closed.replace(/""/g, '').indexOf('"')
  return open < 0 ? closed : closed.replace(/""/g, '').slice(0, open)
}

const LEAK_PATTERNS: [string, RegExp][] = [
  ['sql:SELECT', /SELECT /],
  ['sql:INSERT', /INSERT /],
  ['sql:UPDATE', /UPDATE /],
  ['sql:WHERE', / WHERE /],
  ['driver:ER_', /\bER_[A-Z]/],
  ['stack', / {4}at /],
  ['stack', /\\n {4}at /],
  ['path:/work/', /\/work\//],
  ['path:.ts:', /\.ts:/],
]

// ── The concurrency-key invariant ────────────────────────────────────────

export interface KeySampler {
  /** One entry per sample that found a key held by two runs or more. */
  readonly violations: { at: number; key: string; runs: string }[]
  readonly samples: number
  /** Samples that failed (the database was down): skipped, not counted as clean. */
  readonly failedSamples: number
  stop(): Promise<void>
}

/**
 * Every `everyMs`, on its own connection: any concurrency key held by two runs
 * in a key-holding status (starting, running, paused, ending)? Bounded by
 * `maxMs` even if nobody stops it.
 */
export function startKeySampler(db: Db, everyMs = 50, maxMs = 15 * 60_000): KeySampler {
  const violations: { at: number; key: string; runs: string }[] = []
  let samples = 0
  let failedSamples = 0
  let stopped = false
  const until = Date.now() + maxMs
  const done = (async () => {
    while (!stopped && Date.now() < until) {
      const t0 = Date.now()
      try {
        const rows = await db.query<{ k: string; ids: string }>(
          `SELECT concurrency_key AS k, GROUP_CONCAT(id ORDER BY id) AS ids FROM event_runs
            WHERE concurrency_key IS NOT NULL AND status IN ('starting','running','paused','ending')
            GROUP BY concurrency_key HAVING COUNT(*) > 1`,
        )
        samples++
        for (const r of rows) violations.push({ at: t0, key: r.k, runs: String(r.ids) })
      } catch {
        failedSamples++
      }
      await sleep(Math.max(0, everyMs - (Date.now() - t0)))
    }
  })()
  return {
    violations,
    get samples() {
      return samples
    },
    get failedSamples() {
      return failedSamples
    },
    async stop() {
      stopped = true
      await done
    },
  }
}

// ── Waiting ──────────────────────────────────────────────────────────────

/** Poll `check` until it answers truthy; throws naming `what` after `timeoutMs`. */
export async function until<T>(
  what: string,
  check: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  { timeoutMs = 30_000, everyMs = 100 }: { timeoutMs?: number; everyMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await check()
      if (v) return v
      last = v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`)
    await sleep(everyMs)
  }
}

/** Run counts per status for one definition. */
export async function statusCounts(db: Db, definitionId: number): Promise<Record<string, number>> {
  const rows = await db.query<{ status: string; n: number }>(
    'SELECT status, COUNT(*) AS n FROM event_runs WHERE definition_id = ? GROUP BY status',
    [definitionId],
  )
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]))
}

export const TERMINAL = ['completed', 'cancelled', 'failed', 'missed'] as const

export function nonTerminal(counts: Record<string, number>): number {
  return Object.entries(counts)
    .filter(([s]) => !(TERMINAL as readonly string[]).includes(s))
    .reduce((n, [, c]) => n + c, 0)
}

/** Percentile of a list of numbers (nearest rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number
}
