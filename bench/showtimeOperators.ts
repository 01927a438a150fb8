/**
 * The steady clients of bench/showtimeClients.ts and what they record: the
 * operators (graphql-ws inbox subscriptions, answering the cues they own with
 * `resolveCue` over HTTP, four in flight each; one cue in ten is also answered
 * by the next operator, who must get `applied: false`), the dashboards
 * (graphql-ws `runChanges`) and the `/healthz` probers. Also the graphql-ws
 * client, the dashboards' subscription and the error log, which the burst and
 * the hostile subscriber (bench/showtimeStressClients.ts) share. Every loop
 * here is bounded in count and in time.
 */
import { Agent as HttpAgent, request } from 'node:http'
import { createClient } from 'graphql-ws'
import WebSocket from 'ws'
import { resolveCue } from './showtimeHttp.ts'
import type { AnswerSample, Command, HealthSample, Sighting } from './showtimeMessages.ts'

const HEALTH_EVERY_MS = 100
/** Bounds: no loop here runs longer or more often than this. */
const MAX_HEALTH_PROBES = 20_000
const MAX_ANSWERS = 50_000
const MAX_DASHBOARD_SAMPLES = 2_000_000

export const errors: string[] = []
export const noteError = (what: string) => {
  if (errors.length < 200) errors.push(what)
}

// ---------------------------------------------------------------- state
export const health: HealthSample[] = []
export const answers: AnswerSample[] = []
export const sightings = new Map<string, Sighting>()
export const dashboardDeliveries: { at: number; delayMs: number }[] = []
export const clients: ReturnType<typeof createClient>[] = []
let stopped = false
/** On `finish`: the operators send no more answers and the probers stop. */
export function stop(): void {
  stopped = true
}

export function wsClient(url: string, token: string): ReturnType<typeof createClient> {
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
export const DASHBOARD = `subscription Board { runChanges { id status currentPhase waitingSteps updatedAt definition { slug } } }`

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

export async function connect(cmd: Extract<Command, { type: 'connect' }>): Promise<{ subscribed: number }> {
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
