/**
 * Everyone around the show of bench/showtime.ts, in their own process so the
 * server's CPU, event loop and RSS are its own: the webhook receiver (answers
 * after 15 ms), the operators (graphql-ws inbox subscriptions, answering the cues
 * they own with `resolveCue` over HTTP, four in flight each; one cue in ten is
 * also answered by the next operator, who must get `applied: false`), the
 * dashboards (graphql-ws `runChanges`), a `/healthz` prober, the burst of
 * answers at once and the hostile subscriber. Driven over IPC by
 * bench/showtime.ts (see {@link Command}); every loop here is bounded in count
 * and in time, and every address is loopback.
 *
 * Times are this process's `Date.now()`; the server stamps steps with the same
 * machine's clock (MariaDB's NOW(3) and node's), so they compare directly.
 */
import { createServer, Agent as HttpAgent, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { createClient } from 'graphql-ws'
import WebSocket from 'ws'
import { RECEIVER_MS } from './showtimeFigures.ts'
import { resolveCue } from './showtimeHttp.ts'

export type Command =
  | {
      type: 'connect'
      /**
       * The instances the clients use, spread evenly: operator i and dashboard
       * i go to instance i mod n (answers too, to the operator's instance).
       */
      wsUrls: string[]
      graphqlUrls: string[]
      /** One `/healthz` prober per URL (every instance, API-only or not); samples name their index. */
      healthUrls: string[]
      operatorTokens: string[]
      viewerToken: string
      dashboards: number
      answersInFlight: number
      /** Operators answer only cues of definitions whose slug matches this; its group 1 is the show's number. */
      answerSlugPattern: string
      /**
       * `mine`: each operator's own cues (`waitingSteps(mine: true)`); `all`:
       * everybody's inbox; `changes`: their own cues as changes
       * (`waitingStepChanges(mine: true)`), only what is new in each event.
       */
      inbox: 'mine' | 'all' | 'changes'
    }
  | { type: 'report' }
  /** The show's instant: the event-loop delay the next report gives is from now. */
  | { type: 'instant' }
  | { type: 'health' }
  | { type: 'burst'; stepIds: string[]; timeoutMs: number; retryRounds: number }
  | { type: 'hostile'; sockets: number; perSocket: number }
  | { type: 'hostileStop' }
  | { type: 'finish' }

export interface HealthSample {
  at: number
  ms: number
  ok: boolean
  /** Which of the connect command's `healthUrls` was probed. */
  instance: number
}

export interface AnswerSample {
  stepId: string
  operator: number
  /** When the request was sent (ms since the epoch). */
  sentAt: number
  ms: number
  applied: boolean | null
  /** true for the deliberate second answer of one cue in ten. */
  second: boolean
  error: string | null
}

export interface Sighting {
  stepId: string
  /** The step's startedAt as delivered (when it parked). */
  parkedAt: number
  firstAnyAt: number
  firstOwnerAt: number | null
}

export interface ClientsReport {
  type: 'report'
  health: HealthSample[]
  answers: AnswerSample[]
  sightings: Sighting[]
  dashboardDeliveries: { at: number; delayMs: number }[]
  receiverKeys: string[]
  errors: string[]
  rssMb: number
  /**
   * This process's own event-loop delay since the last report (ms, the
   * sampling resolution subtracted): a client that lags stamps what it
   * receives late, and that lag is the bench's, not the server's.
   */
  eld: { p99Ms: number; maxMs: number }
}

export interface BurstAnswer {
  status: number
  code: string | null
  retryAfter: string | null
  applied: boolean | null
  socketError: string | null
  ms: number
}

export interface BurstReport {
  type: 'burstDone'
  first: BurstAnswer[]
  /** Answers to the retries of the ones refused as busy, round by round. */
  retries: BurstAnswer[][]
  wallMs: number
}

const HEALTH_EVERY_MS = 100
/** Bounds: no loop here runs longer or more often than this. */
const MAX_HEALTH_PROBES = 20_000
const MAX_ANSWERS = 50_000
const MAX_DASHBOARD_SAMPLES = 2_000_000

const ELD_RESOLUTION_MS = 10
const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS })
eld.enable()
const eldSinceLastReport = () => {
  const figures = {
    p99Ms: Math.max(0, Math.round(eld.percentile(99) / 1e6 - ELD_RESOLUTION_MS)),
    maxMs: Math.max(0, Math.round(eld.max / 1e6 - ELD_RESOLUTION_MS)),
  }
  eld.reset()
  return figures
}

const send = (msg: unknown) => process.send?.(msg)
const errors: string[] = []
const noteError = (what: string) => {
  if (errors.length < 200) errors.push(what)
}

// ---------------------------------------------------------------- receiver
const receiverKeys: string[] = []
const receiver = createServer((req, res) => {
  receiverKeys.push(String(req.headers['idempotency-key'] ?? ''))
  req.resume()
  req.on('end', () => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 })
      res.end('ok')
    }, RECEIVER_MS)
  })
})
receiver.keepAliveTimeout = 60_000

// ---------------------------------------------------------------- state
const health: HealthSample[] = []
const answers: AnswerSample[] = []
const sightings = new Map<string, Sighting>()
const dashboardDeliveries: { at: number; delayMs: number }[] = []
const clients: ReturnType<typeof createClient>[] = []
const hostileClients: ReturnType<typeof createClient>[] = []
let hostileDeliveries = 0
let hostileRefused = 0
let stopped = false

function wsClient(url: string, token: string): ReturnType<typeof createClient> {
  return createClient({
    url,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
    lazy: true,
  })
}

const INBOX_STEP = 'id startedAt run { id definition { slug } }'
const inboxQuery = (inbox: 'mine' | 'all' | 'changes') =>
  inbox === 'changes'
    ? `subscription Inbox { waitingStepChanges(limit: 500, mine: true) { added { ${INBOX_STEP} } } }`
    : `subscription Inbox { waitingSteps(limit: 500${inbox === 'mine' ? ', mine: true' : ''}) { ${INBOX_STEP} } }`
const DASHBOARD = `subscription Board { runChanges { id status currentPhase waitingSteps updatedAt definition { slug } } }`

interface InboxStep {
  id: string
  startedAt: string | null
  run: { id: string; definition: { slug: string } }
}

/** The operator who owns a show: the definition numbered n (the pattern's group 1) is operator n mod operators'. */
function ownerOf(slug: string, pattern: RegExp, operators: number): number | null {
  const n = Number(pattern.exec(slug)?.[1] ?? Number.NaN)
  return Number.isInteger(n) ? n % operators : null
}

async function connect(cmd: Extract<Command, { type: 'connect' }>): Promise<{ subscribed: number }> {
  const graphqlUrls = cmd.graphqlUrls.map((u) => new URL(u))
  const instanceOf = <T>(xs: readonly T[], i: number) => xs[i % xs.length] as T
  const pattern = new RegExp(cmd.answerSlugPattern)
  const operators = cmd.operatorTokens.length
  let subscribed = 0
  const opened: Promise<void>[] = []
  // The second operator's answers go on their own sockets, so they never queue behind its own.
  const seconds = cmd.operatorTokens.map(() => new HttpAgent({ keepAlive: true, maxSockets: 2 }))

  for (let op = 0; op < operators; op++) {
    const token = cmd.operatorTokens[op] as string
    const agent = new HttpAgent({ keepAlive: true, maxSockets: cmd.answersInFlight })
    const queue: { stepId: string; second: boolean }[] = []
    const queued = new Set<string>()
    let inFlight = 0
    const pump = () => {
      while (!stopped && inFlight < cmd.answersInFlight && queue.length > 0 && answers.length < MAX_ANSWERS) {
        const job = queue.shift() as { stepId: string; second: boolean }
        inFlight++
        const sentAt = Date.now()
        const t0 = performance.now()
        const who = job.second ? (op + 1) % operators : op
        resolveCue(
          instanceOf(graphqlUrls, who),
          cmd.operatorTokens[who] as string,
          job.stepId,
          job.second ? (seconds[who] as HttpAgent) : agent,
        )
          .then(
            (a) => {
              answers.push({
                stepId: job.stepId,
                operator: who,
                sentAt,
                ms: performance.now() - t0,
                applied: a.applied,
                second: job.second,
                error: a.code,
              })
              // One cue in ten: the next operator answers it too, after the owner did.
              if (!job.second && a.applied === true && Number(job.stepId) % 10 === 0) {
                queue.unshift({ stepId: job.stepId, second: true })
              }
              // Refused as busy: a person presses GO again a moment later. Without
              // this a loaded run could leave a cue unanswered and its show unfinished.
              if (a.code === 'BUSY') {
                setTimeout(() => {
                  queue.push(job)
                  pump()
                }, 1000)
              }
            },
            (err: Error) => {
              answers.push({
                stepId: job.stepId,
                operator: who,
                sentAt,
                ms: performance.now() - t0,
                applied: null,
                second: job.second,
                error: `socket: ${err.message}`,
              })
              // Cut off: the press got no answer, so the person presses GO again, as after BUSY.
              setTimeout(() => {
                queue.push(job)
                pump()
              }, 1000)
            },
          )
          .finally(() => {
            inFlight--
            pump()
          })
      }
    }
    const client = wsClient(instanceOf(cmd.wsUrls, op), token)
    clients.push(client)
    opened.push(
      new Promise<void>((ready) => {
        let first = true
        client.subscribe<{ waitingSteps?: InboxStep[]; waitingStepChanges?: { added: InboxStep[] } }>(
          { query: inboxQuery(cmd.inbox) },
          {
            next(result) {
              const at = Date.now()
              if (result.errors?.length) noteError(`inbox: ${result.errors[0]?.message}`)
              // A change's added cues are the new ones; a whole inbox is looked through for them.
              const steps = result.data?.waitingStepChanges?.added ?? result.data?.waitingSteps ?? []
              for (const s of steps) {
                const owner = ownerOf(s.run.definition.slug, pattern, operators)
                let seen = sightings.get(s.id)
                if (!seen) {
                  seen = {
                    stepId: s.id,
                    parkedAt: s.startedAt ? Date.parse(s.startedAt) : Number.NaN,
                    firstAnyAt: at,
                    firstOwnerAt: null,
                  }
                  sightings.set(s.id, seen)
                }
                if (owner === op) {
                  seen.firstOwnerAt ??= at
                  if (!queued.has(s.id)) {
                    queued.add(s.id)
                    queue.push({ stepId: s.id, second: false })
                  }
                }
              }
              pump()
              if (first) {
                first = false
                subscribed++
                ready()
              }
            },
            error(err) {
              noteError(`inbox socket: ${err instanceof Error ? err.message : JSON.stringify(err)}`)
              ready()
            },
            complete() {
              ready()
            },
          },
        )
      }),
    )
  }
  for (let d = 0; d < cmd.dashboards; d++) {
    const client = wsClient(instanceOf(cmd.wsUrls, d), cmd.viewerToken)
    clients.push(client)
    client.subscribe<{ runChanges: { updatedAt: string } }>(
      { query: DASHBOARD },
      {
        next(result) {
          if (result.errors?.length) noteError(`dashboard: ${result.errors[0]?.message}`)
          const ev = result.data?.runChanges
          if (!ev || dashboardDeliveries.length >= MAX_DASHBOARD_SAMPLES) return
          const at = Date.now()
          dashboardDeliveries.push({ at, delayMs: at - Date.parse(ev.updatedAt) })
        },
        error(err) {
          noteError(`dashboard socket: ${err instanceof Error ? err.message : JSON.stringify(err)}`)
        },
        complete() {},
      },
    )
    subscribed++
  }
  await Promise.race([Promise.all(opened), new Promise((r) => setTimeout(r, 30_000))])

  // The probers: one GET /healthz every 100 ms on a kept-alive socket per instance, as a load balancer does.
  cmd.healthUrls.forEach((u, instance) => void probe(new URL(u), instance))
  return { subscribed }
}

async function probe(healthUrl: URL, instance: number): Promise<void> {
  const healthAgent = new HttpAgent({ keepAlive: true, maxSockets: 1 })
  while (!stopped && health.length < MAX_HEALTH_PROBES) {
    const at = Date.now()
    const t0 = performance.now()
    const ok = await new Promise<boolean>((resolve) => {
      const req = request(
        { host: healthUrl.hostname, port: healthUrl.port, path: healthUrl.pathname, agent: healthAgent },
        (res) => {
          res.resume()
          res.on('end', () => resolve(res.statusCode === 200))
        },
      )
      req.setTimeout(5000, () => req.destroy(new Error('timeout')))
      req.on('error', () => resolve(false))
      req.end()
    })
    const ms = performance.now() - t0
    health.push({ at, ms, ok, instance })
    if (ms < HEALTH_EVERY_MS) await new Promise((r) => setTimeout(r, HEALTH_EVERY_MS - ms))
  }
}

/**
 * Every answer at once, each on its own connection; each one refused as busy
 * (or cut off at the socket) asks again on its own after its Retry-After, as
 * a well-behaved client does, at most `retryRounds` times and while
 * `timeoutMs` lasts. `retries[k]` holds the answers to every (k+1)-th try.
 */
async function burst(cmd: Extract<Command, { type: 'burst' }>, graphqlUrl: URL, tokens: string[]) {
  const began = performance.now()
  const one = async (stepId: string, i: number): Promise<BurstAnswer> => {
    const t0 = performance.now()
    try {
      const a = await resolveCue(graphqlUrl, tokens[i % tokens.length] as string, stepId, false)
      const ra = a.headers['retry-after']
      return {
        status: a.status,
        code: a.code,
        retryAfter: ra === undefined ? null : String(ra),
        applied: a.applied,
        socketError: null,
        ms: performance.now() - t0,
      }
    } catch (err) {
      const e = err as NodeJS.ErrnoException
      return {
        status: 0,
        code: null,
        retryAfter: null,
        applied: null,
        socketError: e.code ?? e.message,
        ms: performance.now() - t0,
      }
    }
  }
  const retries: BurstAnswer[][] = []
  const answerWithRetries = async (stepId: string, i: number): Promise<BurstAnswer> => {
    const first = await one(stepId, i)
    let last = first
    for (let k = 0; k < cmd.retryRounds; k++) {
      if (last.code !== 'BUSY' && last.socketError === null) break
      const waitS = Math.min(10, Number(last.retryAfter ?? 1) || 1)
      if (performance.now() + waitS * 1000 - began > cmd.timeoutMs) break
      await new Promise((r) => setTimeout(r, waitS * 1000))
      last = await one(stepId, i)
      const atRetry = retries[k] ?? []
      retries[k] = atRetry
      atRetry.push(last)
    }
    return first
  }
  const first = await Promise.all(cmd.stepIds.map((id, i) => answerWithRetries(id, i)))
  return { first, retries, wallMs: performance.now() - began }
}

async function hostile(cmd: Extract<Command, { type: 'hostile' }>, wsUrl: string, token: string) {
  let subscribed = 0
  for (let s = 0; s < cmd.sockets; s++) {
    const client = wsClient(wsUrl, token)
    hostileClients.push(client)
    for (let k = 0; k < cmd.perSocket; k++) {
      client.subscribe<{ runChanges: { id: string } }>(
        { query: DASHBOARD },
        {
          next(result) {
            const code = result.errors?.[0]?.extensions?.code
            // Past SUBSCRIPTIONS_PER_PRINCIPAL (or _PER_INSTANCE) the server refuses: what it should do.
            if (code === 'TOO_MANY_OPERATIONS' || code === 'BUSY') hostileRefused++
            else if (result.errors?.length) noteError(`hostile: ${result.errors[0]?.message}`)
            else hostileDeliveries++
          },
          error(err) {
            noteError(`hostile socket: ${err instanceof Error ? err.message : JSON.stringify(err)}`)
          },
          complete() {},
        },
      )
      subscribed++
    }
  }
  return subscribed
}

let connected: Extract<Command, { type: 'connect' }> | null = null

process.on('message', (cmd: Command) => {
  const run = async () => {
    switch (cmd.type) {
      case 'connect': {
        connected = cmd
        send({ type: 'connected', ...(await connect(cmd)), errors: errors.slice(0, 5) })
        return
      }
      case 'report': {
        const report: ClientsReport = {
          type: 'report',
          health,
          answers,
          sightings: [...sightings.values()],
          dashboardDeliveries,
          receiverKeys,
          errors,
          rssMb: process.memoryUsage().rss / 2 ** 20,
          eld: eldSinceLastReport(),
        }
        send(report)
        return
      }
      case 'instant': {
        eld.reset()
        return
      }
      case 'health': {
        // Only the prober's samples: the full report can be megabytes of deliveries.
        send({ type: 'healthReport', health })
        return
      }
      case 'burst': {
        if (!connected) throw new Error('burst before connect')
        const r = await burst(cmd, new URL(connected.graphqlUrls[0] as string), connected.operatorTokens)
        send({ type: 'burstDone', ...r } satisfies BurstReport)
        return
      }
      case 'hostile': {
        if (!connected) throw new Error('hostile before connect')
        const subscribed = await hostile(cmd, connected.wsUrls[0] as string, connected.viewerToken)
        send({ type: 'hostileReady', subscribed })
        return
      }
      case 'hostileStop': {
        const deliveries = hostileDeliveries
        await Promise.race([
          Promise.allSettled(hostileClients.map((c) => c.dispose())),
          new Promise((r) => setTimeout(r, 3000)),
        ])
        send({ type: 'hostileStopped', deliveries, refused: hostileRefused })
        return
      }
      case 'finish': {
        stopped = true
        await Promise.race([
          Promise.allSettled([...clients, ...hostileClients].map((c) => c.dispose())),
          new Promise((r) => setTimeout(r, 2000)),
        ])
        receiver.closeAllConnections()
        receiver.close()
        process.exit(0)
      }
    }
  }
  run().catch((err) => {
    send({ type: 'failed', error: String((err as Error)?.stack ?? err) })
    process.exit(1)
  })
})

receiver.listen(0, '127.0.0.1', () => {
  const { port } = receiver.address() as AddressInfo
  send({ type: 'receiver', url: `http://127.0.0.1:${port}/hook` })
})
