/**
 * WebSocket limits: a per-socket cap on operations (the 101st subscription is
 * refused with an error the client can read, the socket stays up), and
 * sockets that never send connection_init are closed after the configured
 * timeout.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import {
  eventually,
  SESSION_PROGRAM,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

const STATUS = 'subscription ($id: ID!) { runStatus(id: $id) { id status } }'

let s: TestServer
let runId: string
beforeAll(async () => {
  s = await startTestServer({ env: { WS_INIT_TIMEOUT_MS: '300' } })
  const created = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!) { createDefinition(input: { slug: "ws-limits", title: "WS", program: $p }) { id } }',
    { variables: { p: SESSION_PROGRAM } },
  )
  const defId = created.body.data?.createDefinition.id as string
  const started = await s.gql<{ startRun: { id: string } }>(
    `mutation { startRun(definitionId: "${defId}", at: "2099-01-01T00:00:00Z") { id } }`,
  )
  runId = started.body.data?.startRun.id as string
  expect(runId).toMatch(/^\d+$/)
})
afterAll(async () => {
  await s?.close()
})

describe('subscriptions per socket', () => {
  it('the default cap is 100', () => {
    expect(s.config.limits.wsMaxSubscriptions).toBe(100)
  })

  it('refuses the 101st with a clear error, keeps the socket, and accepts again once one completes', async () => {
    const closes: number[] = []
    const client = wsClient(s, 'viewer', (e) => closes.push(e.code))
    try {
      const subs = Array.from({ length: 100 }, () => wsSubscribe(client, STATUS, { id: runId }))
      await Promise.all(subs.map((sub) => sub.until((e) => e.data != null)))

      const extra = wsSubscribe(client, STATUS, { id: runId })
      const refused = await extra.done.then(
        () => null,
        (err: unknown) => err as { message: string; extensions?: Record<string, unknown> }[],
      )
      expect(refused?.[0]?.message).toMatch(/at most 100 may be open at once \(WS_MAX_SUBSCRIPTIONS\)/)
      expect(refused?.[0]?.extensions?.code).toBe('TOO_MANY_OPERATIONS')
      expect(closes).toEqual([])

      // The socket still works: free a slot and the next subscription is served.
      subs[0]?.stop()
      await eventually(async () => {
        const again = wsSubscribe(client, STATUS, { id: runId })
        const ok = await Promise.race([
          again.until((e) => e.data != null, 2000).then(() => true),
          again.done.then(
            () => false,
            () => false,
          ),
        ])
        if (!ok) again.stop()
        return ok
      }, 5000)
      expect(closes).toEqual([])
      for (const sub of subs) sub.stop()
    } finally {
      await client.dispose()
    }
  })
})

describe('connection_init timeout', () => {
  it('closes a socket that never authenticates after WS_INIT_TIMEOUT_MS (4408)', async () => {
    const socket = new WebSocket(s.wsUrl, 'graphql-transport-ws')
    const opened = Date.now()
    const closed = await new Promise<{ code: number; afterMs: number }>((resolve, reject) => {
      socket.on('close', (code) => resolve({ code, afterMs: Date.now() - opened }))
      socket.on('error', reject)
      setTimeout(() => reject(new Error('still open after 2 s')), 2000)
    })
    expect(closed.code).toBe(4408)
    expect(closed.afterMs).toBeGreaterThanOrEqual(250)
    expect(closed.afterMs).toBeLessThan(1500)
  })
})
