/**
 * A notification's POST (src/notify/senders.ts `postJson`) against a real
 * receiver (test/helpers/receiver.ts): what a delivery's `lastError` says when
 * the receiver is gone, answers an error or is not allowed, and whether the
 * dispatcher may try again. A refused connection names its socket error the
 * way a webhook step's failure does (test/webhook.test.ts), so an operator
 * reads one format.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { DeliveryError, postJson } from '../src/notify/senders.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'

const open: Receiver[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((rx) => rx.close()))
})

async function receiver(status: number): Promise<Receiver> {
  const rx = await startReceiver()
  rx.respond = () => status
  open.push(rx)
  return rx
}

const post = (url: string, allow: string[]) => postJson(url, '{}', {}, { webhookAllow: allow, secrets: {} })

async function deliveryError(url: string, allow: string[]): Promise<DeliveryError> {
  const err = await post(url, allow).then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(DeliveryError)
  return err as DeliveryError
}

describe('a notification POST', () => {
  it('to a receiver that is gone: retryable, naming the socket error and its address', async () => {
    const gone = await startReceiver()
    await gone.close()
    const port = new URL(gone.url).port
    const err = await deliveryError(`${gone.url}/hook`, [`${gone.url}/`])
    expect(err.retryable).toBe(true)
    expect(err.message).toBe(
      `POST ${gone.url}/hook failed: ECONNREFUSED (connect ECONNREFUSED 127.0.0.1:${port})`,
    )
  })

  it('answered with an error status: retryable, naming the status', async () => {
    const rx = await receiver(503)
    const err = await deliveryError(`${rx.url}/hook`, [`${rx.url}/`])
    expect(err.retryable).toBe(true)
    expect(err.message).toBe(`POST ${rx.url}/hook answered HTTP 503`)
    expect(rx.requests).toHaveLength(1)
  })

  it('to a target outside the allow-list: refused for good, nothing sent', async () => {
    const rx = await receiver(200)
    const err = await deliveryError(`${rx.url}/hook`, ['http://example.invalid/'])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(/^refused: /)
    expect(rx.requests).toHaveLength(0)
  })

  it('answered 2xx: delivered', async () => {
    const rx = await receiver(204)
    await expect(post(`${rx.url}/hook`, [`${rx.url}/`])).resolves.toBeUndefined()
    expect(rx.requests.map((r) => r.path)).toEqual(['/hook'])
  })
})
