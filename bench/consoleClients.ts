/**
 * The consoles of bench/console.ts, in their own process so the server's event
 * loop is its own: `runChanges` and `waitingSteps` subscribers over 20
 * graphql-ws connections. Started with fork() and driven over IPC:
 *
 *   parent → { type: 'start', wsUrl, tokens, subscribers, filters, inboxSubscribers }
 *   child  → { type: 'ready', subscribeMs } once every inbox subscriber has its first inbox
 *   parent → { type: 'finish' }
 *   child  → { type: 'report', deliveries, delays, errors } and exits
 *
 * Delay of a delivery = its arrival here − the run's `updatedAt` (stamped by
 * MariaDB when the change was written; same machine, same clock).
 */
import { createClient } from 'graphql-ws'
import WebSocket from 'ws'

interface StartMessage {
  type: 'start'
  wsUrl: string
  /** Viewer tokens, one per socket in turn (a caller may hold only so many subscriptions). */
  tokens: readonly string[]
  subscribers: number
  inboxSubscribers: number
  filters: (Record<string, unknown> | null)[]
}

const RUN_CHANGES =
  'subscription ($f: RunFilter) { runChanges(filter: $f) { id status updatedAt definition { id } } }'
const INBOX = 'subscription { waitingSteps(limit: 50) { id run { id } } }'
// 50 sockets: the subscriptions stay under the per-socket cap (WS_MAX_SUBSCRIPTIONS, 100).
const CONNECTIONS = 50

const send = (msg: unknown) => process.send?.(msg)

function main(start: StartMessage): void {
  const delays: number[] = []
  let deliveries = 0
  let errors = 0
  const firstErrors: string[] = []
  const noteError = (what: unknown) => {
    errors++
    if (firstErrors.length < 3) firstErrors.push(String(what).slice(0, 200))
  }
  const began = Date.now()
  const clients = Array.from({ length: CONNECTIONS }, (_, c) =>
    createClient({
      url: start.wsUrl,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${start.tokens[c % start.tokens.length]}` },
      retryAttempts: 0,
      lazy: true,
    }),
  )
  const sink = { next: () => {}, error: noteError, complete: () => {} }
  for (let i = 0; i < start.subscribers; i++) {
    const client = clients[i % CONNECTIONS] as (typeof clients)[number]
    client.subscribe<{ runChanges: { updatedAt: string } }>(
      { query: RUN_CHANGES, variables: { f: start.filters[i % start.filters.length] } },
      {
        ...sink,
        next: (e) => {
          if (e.errors?.length) noteError(e.errors[0]?.message)
          const at = e.data?.runChanges.updatedAt
          if (!at) return
          deliveries++
          delays.push(Date.now() - Date.parse(at))
        },
      },
    )
  }
  let inboxReady = 0
  for (let i = 0; i < start.inboxSubscribers; i++) {
    const client = clients[i % CONNECTIONS] as (typeof clients)[number]
    let first = true
    client.subscribe(
      { query: INBOX },
      {
        ...sink,
        next: () => {
          if (!first) return
          first = false
          inboxReady++
          if (inboxReady === start.inboxSubscribers) send({ type: 'ready', subscribeMs: Date.now() - began })
        },
      },
    )
  }
  process.on('message', async (msg: { type?: string }) => {
    if (msg?.type !== 'finish') return
    send({ type: 'report', deliveries, delays, errors, firstErrors })
    await Promise.all(clients.map((c) => c.dispose()))
    process.exit(0)
  })
}

process.once('message', (msg: StartMessage) => {
  try {
    main(msg)
  } catch (err) {
    send({ type: 'failed', error: String(err) })
    process.exit(1)
  }
})
