/**
 * A notification's POST (src/notify/senders.ts `postJson`) against real
 * sockets: what a delivery's `lastError` says when the receiver is gone,
 * answers an error or is not allowed, and whether the dispatcher may try
 * again. A refused connection names its socket error the way a webhook step's
 * failure does (test/webhook.test.ts), so an operator reads one format.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { DeliveryError, postJson } from '../src/notify/senders.ts'

const servers: Server[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))))
})

async function receiver(status: number): Promise<{ origin: string; server: Server }> {
  const server = createServer((_req, res) => {
    res.statusCode = status
    res.end('{}')
  })
  servers.push(server)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }
}

async function deliveryError(url: string, allow: string[]): Promise<DeliveryError> {
  const err = await postJson(url, '{}', {}, { webhookAllow: allow, secrets: {} }).then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(DeliveryError)
  return err as DeliveryError
}

describe('a notification POST', () => {
  it('to a receiver that is gone: retryable, naming the socket error and its address', async () => {
    const gone = await receiver(200)
    await new Promise((r) => gone.server.close(r))
    const port = new URL(gone.origin).port
    const err = await deliveryError(`${gone.origin}/hook`, [`${gone.origin}/`])
    expect(err.retryable).toBe(true)
    expect(err.message).toBe(
      `POST ${gone.origin}/hook failed: ECONNREFUSED (connect ECONNREFUSED 127.0.0.1:${port})`,
    )
  })

  it('answered with an error status: retryable, naming the status', async () => {
    const rx = await receiver(503)
    const err = await deliveryError(`${rx.origin}/hook`, [`${rx.origin}/`])
    expect(err.retryable).toBe(true)
    expect(err.message).toBe(`POST ${rx.origin}/hook answered HTTP 503`)
  })

  it('to a target outside the allow-list: refused for good, nothing sent', async () => {
    const rx = await receiver(200)
    let requests = 0
    rx.server.on('request', () => requests++)
    const err = await deliveryError(`${rx.origin}/hook`, ['http://example.invalid/'])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(/^refused: /)
    expect(requests).toBe(0)
  })

  it('answered 2xx: delivered', async () => {
    const rx = await receiver(204)
    await expect(
      postJson(`${rx.origin}/hook`, '{}', {}, { webhookAllow: [`${rx.origin}/`], secrets: {} }),
    ).resolves.toBeUndefined()
  })
})
