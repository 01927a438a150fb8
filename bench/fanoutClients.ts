/**
 * The dashboards of bench/fanout.ts, in their own process so the server's CPU
 * and RSS are its own: one graphql-ws connection per subscriber, each watching
 * one run's `runStatus`. Started with fork() and driven over IPC:
 *
 *   parent → { type: 'start', wsUrl, tokens, runIds, perRun }
 *   child  → { type: 'ready', connectMs } once every subscriber has its first event
 *   parent → { type: 'finish' }
 *   child  → { type: 'report', ... } and exits
 *
 * Delay of a delivery = the moment it arrived here − its `updatedAt` (stamped by
 * MariaDB when the transition was written; same machine, same clock).
 */
import { createClient } from 'graphql-ws'
import WebSocket from 'ws'

interface StartMessage {
  type: 'start'
  wsUrl: string
  /** Viewer tokens, one per socket in turn (a caller may hold only so many subscriptions). */
  tokens: readonly string[]
  runIds: number[]
  perRun: number
}

interface RunStatusEvent {
  id: string
  status: string
  updatedAt: string
}

const QUERY =
  'subscription ($id: ID!) { runStatus(id: $id) { id status health currentPhase waitingSteps updatedAt } }'
const OPEN_AT_ONCE = 100

const send = (msg: unknown) => process.send?.(msg)

async function main(start: StartMessage): Promise<void> {
  const delays: number[] = []
  let initial = 0
  let events = 0
  let completed = 0
  const errors: string[] = []
  const statusesSeen = new Map<string, number>()
  const clients: ReturnType<typeof createClient>[] = []
  const targets = start.runIds.flatMap((id) => Array.from({ length: start.perRun }, () => id))
  const total = targets.length
  const began = Date.now()
  let readyResolve: () => void = () => {}
  const ready = new Promise<void>((r) => {
    readyResolve = r
  })

  const subscribe = (runId: number) =>
    new Promise<void>((opened) => {
      const client = createClient({
        url: start.wsUrl,
        webSocketImpl: WebSocket,
        connectionParams: { authorization: `Bearer ${start.tokens[clients.length % start.tokens.length]}` },
        retryAttempts: 0,
        lazy: true,
      })
      clients.push(client)
      let first = true
      client.subscribe<{ runStatus: RunStatusEvent }>(
        { query: QUERY, variables: { id: String(runId) } },
        {
          next(result) {
            const at = Date.now()
            const ev = result.data?.runStatus
            if (result.errors?.length) errors.push(result.errors[0]?.message ?? 'error')
            if (!ev) return
            if (first) {
              first = false
              initial++
              opened()
              if (initial === total) readyResolve()
              return
            }
            events++
            statusesSeen.set(ev.status, (statusesSeen.get(ev.status) ?? 0) + 1)
            delays.push(at - Date.parse(ev.updatedAt))
          },
          error(err) {
            errors.push(err instanceof Error ? err.message : JSON.stringify(err))
            opened()
          },
          complete() {
            completed++
            opened()
          },
        },
      )
    })

  // Open in waves, as dashboards would not all connect in the same millisecond.
  for (let i = 0; i < targets.length; i += OPEN_AT_ONCE) {
    await Promise.all(targets.slice(i, i + OPEN_AT_ONCE).map((id) => subscribe(id)))
  }
  await Promise.race([ready, new Promise((r) => setTimeout(r, 60_000))])
  send({ type: 'ready', connectMs: Date.now() - began, subscribed: initial, errors: errors.slice(0, 5) })

  await new Promise<void>((resolve) => {
    process.on('message', (msg: { type?: string }) => {
      if (msg?.type === 'finish') resolve()
    })
  })
  send({
    type: 'report',
    subscribers: total,
    subscribed: initial,
    events,
    completed,
    delays,
    statusesSeen: Object.fromEntries(statusesSeen),
    errors: errors.length,
    firstErrors: errors.slice(0, 5),
    rssMb: process.memoryUsage().rss / 2 ** 20,
  })
  // Closing 2,000 sockets politely is not what is measured: leave at once.
  await Promise.race([
    Promise.allSettled(clients.map((c) => c.dispose())),
    new Promise((r) => setTimeout(r, 2000)),
  ])
  process.exit(0)
}

process.once('message', (msg: StartMessage) => {
  main(msg).catch((err) => {
    send({ type: 'failed', error: String(err?.stack ?? err) })
    process.exit(1)
  })
})
