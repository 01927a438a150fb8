/**
 * Shared setup for the runner suites (`test/runner.*.test.ts`):
 * - {@link TestClock}: the runner's clock, moved by hand, so tests about time
 *   (backoffs, waits, grace windows, DST) never sleep;
 * - {@link startReceiver}: a real HTTP server (node:http) that webhooks call,
 *   recording every request and counting calls per `Idempotency-Key`;
 * - helpers to make registries, definitions and runs, and to wait for a status
 *   when real time is the point (several runner instances, a child process).
 */
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { afterAll, beforeAll, beforeEach } from 'vitest'
import type { Db, Queryable } from '../../sql/db.ts'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as logsSql from '../../sql/eventRunLogs.ts'
import type { RunListRow } from '../../sql/eventRuns/index.ts'
import * as runsSql from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as stepsSql from '../../sql/eventSteps/index.ts'
import type { RunStatus } from '../../sql/states.ts'
import {
  type CreateDefinitionInput,
  createDefinition,
  type DefinitionDeps,
} from '../../src/operations/definitions.ts'
import type { ControlDeps } from '../../src/operations/runControls.ts'
import type { Clock } from '../../src/runner/clock.ts'
import { Runner } from '../../src/runner/runner.ts'
import {
  type AnyStepKind,
  createDefaultRegistry,
  type StepRegistry,
} from '../../src/runner/steps/registry.ts'
import { type DefinitionFixture, makeDefinition, makeRun, unique } from './fixtures.ts'

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ── Clock ────────────────────────────────────────────────────────────────

/** A clock that stands still until the test moves it. */
export class TestClock implements Clock {
  private ms: number
  constructor(start: Date | number | string = Date.now()) {
    this.ms = new Date(start).getTime()
  }
  now(): Date {
    return new Date(this.ms)
  }
  set(to: Date | number | string): Date {
    this.ms = new Date(to).getTime()
    return this.now()
  }
  advance(ms: number): Date {
    this.ms += ms
    return this.now()
  }
}

// ── Webhook receiver ─────────────────────────────────────────────────────

export interface ReceivedCall {
  seq: number
  method: string
  path: string
  key: string | null
  body: string
  receivedAt: number
  /** Set once a response was written (undefined while held or never answered). */
  answeredAt?: number
  /** The client went away before an answer was written. */
  aborted?: boolean
}

/** What the receiver answers; `hold` keeps the request open until {@link WebhookReceiver.releaseHeld}. */
export interface Reply {
  status?: number
  delayMs?: number
  hold?: boolean
  body?: string
}

/** Decides the reply to a call; `nthForKey` is 1 for the first call carrying that key. */
export type ReplyRule = (call: ReceivedCall, nthForKey: number) => Reply

export interface WebhookReceiver {
  /** `http://127.0.0.1:PORT` (no trailing slash). */
  readonly url: string
  readonly calls: ReceivedCall[]
  /** Calls per Idempotency-Key. */
  countsByKey(): Map<string, number>
  /** Calls received and not (yet) answered, the client still connected. */
  pending(): ReceivedCall[]
  /** The reply rule for paths starting with `prefix` (longest prefix wins); default 200. */
  route(prefix: string, rule: ReplyRule): void
  /** Answer held requests with 200: those `which` selects, or (default) all of them. */
  releaseHeld(which?: (call: ReceivedCall) => boolean): void
  reset(): void
  close(): Promise<void>
}

export async function startReceiver(): Promise<WebhookReceiver> {
  const calls: ReceivedCall[] = []
  const perKey = new Map<string, number>()
  const routes = new Map<string, ReplyRule>()
  const held = new Set<{ call: ReceivedCall; res: ServerResponse }>()
  const sockets = new Set<Socket>()
  let seq = 0

  const answer = (call: ReceivedCall, res: ServerResponse, status: number, body: string) => {
    if (res.destroyed || res.writableEnded) return
    call.answeredAt = Date.now()
    res.writeHead(status, { 'content-type': 'text/plain' })
    res.end(body)
  }

  const ruleFor = (path: string): ReplyRule | undefined => {
    let best: string | undefined
    for (const prefix of routes.keys())
      if (path.startsWith(prefix) && (!best || prefix.length > best.length)) best = prefix
    return best === undefined ? undefined : routes.get(best)
  }

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const keyHeader = req.headers['idempotency-key']
      const call: ReceivedCall = {
        seq: ++seq,
        method: req.method ?? '',
        path: req.url ?? '/',
        key: typeof keyHeader === 'string' ? keyHeader : null,
        body: Buffer.concat(chunks).toString('utf8'),
        receivedAt: Date.now(),
      }
      calls.push(call)
      const n = (perKey.get(call.key ?? '') ?? 0) + 1
      perKey.set(call.key ?? '', n)
      res.on('close', () => {
        if (call.answeredAt === undefined) call.aborted = true
      })
      const reply = ruleFor(call.path)?.(call, n) ?? {}
      const status = reply.status ?? 200
      const body = reply.body ?? 'ok'
      if (reply.hold) {
        const entry = { call, res }
        held.add(entry)
        res.on('close', () => held.delete(entry))
        return
      }
      if (reply.delayMs) setTimeout(() => answer(call, res, status, body), reply.delayMs)
      else answer(call, res, status, body)
    })
  })
  server.on('connection', (s: Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    countsByKey() {
      const out = new Map<string, number>()
      for (const c of calls) out.set(c.key ?? '', (out.get(c.key ?? '') ?? 0) + 1)
      return out
    },
    pending() {
      return calls.filter((c) => c.answeredAt === undefined && !c.aborted)
    },
    route(prefix, rule) {
      routes.set(prefix, rule)
    },
    releaseHeld(which) {
      for (const entry of held) {
        if (which && !which(entry.call)) continue
        answer(entry.call, entry.res, 200, 'released')
        held.delete(entry)
      }
    },
    reset() {
      calls.length = 0
      perKey.clear()
      routes.clear()
    },
    async close() {
      for (const { res } of held) res.destroy()
      held.clear()
      for (const s of sockets) s.destroy()
      server.close()
      server.closeAllConnections()
    },
  }
}

/**
 * A receiver for the whole file as suite hooks: started in `beforeAll`, closed in
 * `afterAll` and, with `resetEach`, reset before every test. Call it at the top
 * level after {@link useTestDb}, so it starts after the database and closes
 * before it is dropped. The answer stands for the receiver once `beforeAll` has
 * run (reading it earlier throws).
 */
export function useReceiver(opts: { resetEach?: boolean } = {}): WebhookReceiver {
  let current: WebhookReceiver | undefined
  const get = (): WebhookReceiver => {
    if (!current) throw new Error('useReceiver: the receiver exists only once beforeAll has run')
    return current
  }
  beforeAll(async () => {
    current = await startReceiver()
  })
  afterAll(async () => {
    await current?.close()
  })
  if (opts.resetEach) beforeEach(() => get().reset())
  return {
    get url() {
      return get().url
    },
    get calls() {
      return get().calls
    },
    countsByKey: () => get().countsByKey(),
    pending: () => get().pending(),
    route: (prefix, rule) => get().route(prefix, rule),
    releaseHeld: (which) => get().releaseHeld(which),
    reset: () => get().reset(),
    close: () => get().close(),
  }
}

// ── Registries, definitions, runs ────────────────────────────────────────

/** The built-ins plus `extra` custom kinds. */
export function makeRegistry(extra: AnyStepKind[] = []): StepRegistry {
  const registry = createDefaultRegistry()
  for (const kind of extra) registry.register(kind)
  return registry
}

/** A custom kind that runs `fn` and completes (side-effect free and not inline unless said otherwise). */
export function customKind(
  kind: string,
  fn: (ctx: Parameters<AnyStepKind['execute']>[0]) => Promise<unknown> | unknown,
  opts: { sideEffects?: boolean; inline?: boolean } = {},
): AnyStepKind {
  return {
    kind,
    sideEffects: opts.sideEffects ?? false,
    // an inline kind's steps take no concurrency slot in a batch (src/runner/advance.ts)
    inline: opts.inline ?? false,
    validate: () => [],
    async execute(ctx) {
      const result = await fn(ctx)
      return { type: 'completed', result: result ?? null }
    },
  }
}

export interface RunnerTestEnv {
  db: Db
  registry: StepRegistry
  clock: Clock
  /** Passed to controls as their nudge (e.g. `() => runner.nudge()`). */
  nudge?: () => void
}

export function definitionDeps(env: RunnerTestEnv, horizonMs?: number): DefinitionDeps {
  return {
    db: env.db,
    registry: env.registry,
    clock: env.clock,
    ...(horizonMs !== undefined && { horizonMs }),
  }
}

export function controlDeps(env: RunnerTestEnv): ControlDeps {
  return { db: env.db, clock: env.clock, ...(env.nudge && { nudge: env.nudge }) }
}

/** Create a definition (and its version 1) through `src/definitions.ts`, with a unique slug by default. */
export function defineEvent(
  env: RunnerTestEnv,
  input: Omit<CreateDefinitionInput, 'slug' | 'title'> & { slug?: string; title?: string },
): Promise<DefinitionRow> {
  return createDefinition(
    definitionDeps(env),
    { slug: unique('ev'), title: 'Test event', ...input } as CreateDefinitionInput,
    'admin#test',
  )
}

/**
 * `count` runs of `def` made as a schedule would make them, all already due
 * (scopes s0, s1, …, a millisecond apart); their ids, oldest first.
 */
export async function materialiseDueRuns(
  db: Queryable,
  def: Pick<DefinitionRow, 'id' | 'currentVersionId'>,
  count: number,
): Promise<number[]> {
  const base = Date.now() - 1000
  await runsSql.materialiseMany(
    db,
    Array.from({ length: count }, (_, i) => ({
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope: `s${i}`,
      scheduledFor: new Date(base + i),
      timezone: 'UTC',
      concurrencyKey: null,
      startedBy: 'test',
    })),
  )
  const rows = await db.query<{ id: number }>(
    'SELECT id FROM event_runs WHERE definition_id = ? ORDER BY scheduled_for',
    [def.id],
  )
  return rows.map((r) => Number(r.id))
}

/** Build a program from phases given as `[name, steps, ending?]`. */
export function program(...phases: [name: string, steps: unknown[], ending?: boolean][]): unknown {
  return { phases: phases.map(([name, steps, ending]) => ({ name, steps, ...(ending && { ending: true }) })) }
}

export async function runOf(db: Queryable, id: number): Promise<RunListRow> {
  const run = await runsSql.getById(db, id)
  if (!run) throw new Error(`run ${id} not found`)
  return run
}

export function stepsOf(db: Queryable, runId: number): Promise<StepRow[]> {
  return stepsSql.listForRun(db, runId)
}

/** When a step started (epoch ms); throws for a step that has not. */
export function startedAtMs(step: StepRow | undefined): number {
  if (!step?.startedAt) throw new Error(`step ${step?.id} has not started`)
  return step.startedAt.getTime()
}

/** A run's log messages, oldest first. */
export async function logLines(db: Queryable, runId: number): Promise<string[]> {
  const rows = await logsSql.listForRun(db, runId, 500)
  return rows.reverse().map((l) => l.message)
}

/** Poll `probe` (real time) until it answers something truthy; throws with `what` on timeout. */
export async function waitFor<T>(
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  {
    timeoutMs = 10_000,
    intervalMs = 20,
    what = 'condition',
  }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(intervalMs)
  }
}

/** Wait (real time) until the run's status is one of `statuses`. */
export function waitForStatus(
  db: Queryable,
  runId: number,
  statuses: RunStatus | readonly RunStatus[],
  timeoutMs = 10_000,
): Promise<RunListRow> {
  const wanted = (Array.isArray(statuses) ? statuses : [statuses]) as readonly RunStatus[]
  return waitFor(
    async () => {
      const run = await runOf(db, runId)
      return wanted.includes(run.status) ? run : null
    },
    { timeoutMs, what: `run ${runId} to reach ${wanted.join('|')}` },
  )
}

/** Run counts per status for a set of runs (or every run). */
export async function statusCounts(db: Queryable, definitionId?: number): Promise<Record<string, number>> {
  const rows = await db.query<{ status: string; n: number }>(
    `SELECT status, COUNT(*) AS n FROM event_runs ${definitionId === undefined ? '' : 'WHERE definition_id = ?'} GROUP BY status`,
    definitionId === undefined ? [] : [definitionId],
  )
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]))
}

/** A show of a cue, then `after` (by default one log line). */
export function cueShow(
  db: Db,
  after: Record<string, unknown>[] = [{ kind: 'core.log', params: { message: 'after GO' } }],
): Promise<DefinitionFixture> {
  return makeDefinition(db, {
    program: {
      phases: [
        {
          name: 'main',
          steps: [{ kind: 'core.cue', params: { prompt: 'GO?' } }, ...after],
        },
      ],
    },
  })
}

/** Run `runId`'s cue, once parked on a person; undefined before. */
export async function parkedCueOf(db: Queryable, runId: number): Promise<StepRow | undefined> {
  return (await stepsOf(db, runId)).find((st) => st.kind === 'core.cue' && st.parked)
}

/**
 * A run of {@link cueShow}, due now, started on `runner`: answers once the
 * cue is parked, with the run's id and the cue.
 */
export async function parkedCueRun(
  db: Db,
  runner: { start(): void },
  after?: Record<string, unknown>[],
): Promise<{ runId: number; cue: StepRow }> {
  const show = await cueShow(db, after)
  const runId = (await makeRun(db, { definition: show, scheduledFor: new Date() })).id
  runner.start()
  const cue = await waitFor(() => parkedCueOf(db, runId), { timeoutMs: 10_000 })
  return { runId, cue }
}

/**
 * `count` runs of a show whose cue comes first (then a log line), due now,
 * started and parked by one tick of a runner on a test clock and given back:
 * their ids, and their cues' ids in the same order.
 */
export async function parkedShows(db: Db, count: number): Promise<{ runIds: number[]; cueIds: number[] }> {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db, registry: makeRegistry(), clock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [
        { kind: 'core.cue', params: { prompt: 'GO?' } },
        { kind: 'core.log', params: { message: 'after' } },
      ],
    ]),
  })
  const runIds = await materialiseDueRuns(db, def, count)
  await new Runner({ db, registry: env.registry, clock, instanceId: 'parked-shows' }).tick()
  const cueIds: number[] = []
  for (const id of runIds) {
    const [cue] = await stepsOf(db, id)
    if (cue?.status !== 'running' || !cue.parked) throw new Error(`run ${id}'s cue did not park`)
    cueIds.push(cue.id)
  }
  return { runIds, cueIds }
}

/** A lease of due in-flight runs (the wake lane's, a pass's), as recorded by `recordStatements`. */
export const isLease = (sql: string) => /^UPDATE event_runs SET claimed_by = \?, claim_token = \?/.test(sql)
/** A set-wise begin of steps, as recorded by `recordStatements`. */
export const isBegin = (sql: string) =>
  /^UPDATE event_run_steps SET status = 'running', attempts = attempts \+ 1/.test(sql)
