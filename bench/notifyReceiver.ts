/**
 * The notification benchmark's receiver: a real `node:http` server on
 * loopback that counts deliveries by `webhook-id`, checks every Standard
 * Webhooks signature with the `standardwebhooks` verifier (what a receiver
 * would use), notes each arrival's time, and answers 204 at once, so any
 * second request with the same id is a duplicate, not a retry.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'

export interface NotifyReceiver {
  url: string
  /** First arrival (ms since the epoch) per webhook-id. */
  firstArrival: Map<string, number>
  /** Requests per webhook-id. */
  counts: Map<string, number>
  /** Requests whose signature did not verify (or that carried no webhook-id). */
  badSignatures: number
  requests: number
  /** Requests beyond the first per webhook-id. */
  duplicates(): number
  /** Forget everything received so far. */
  reset(): void
  close(): Promise<void>
}

/** Bodies above this are refused (a cue notification is about 1 KiB). */
const MAX_BODY_BYTES = 64 * 1024

export async function startNotifyReceiver(secret: string): Promise<NotifyReceiver> {
  const verifier = new Webhook(secret)
  let server: Server
  const rx: NotifyReceiver = {
    url: '',
    firstArrival: new Map(),
    counts: new Map(),
    badSignatures: 0,
    requests: 0,
    duplicates() {
      let n = 0
      for (const c of rx.counts.values()) n += c - 1
      return n
    },
    reset() {
      rx.firstArrival.clear()
      rx.counts.clear()
      rx.badSignatures = 0
      rx.requests = 0
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
  server = createServer((req, res) => {
    const at = Date.now()
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size <= MAX_BODY_BYTES) chunks.push(c)
    })
    req.on('end', () => {
      rx.requests++
      const id = String(req.headers['webhook-id'] ?? '')
      try {
        if (!id || size > MAX_BODY_BYTES) throw new Error('no webhook-id, or too large')
        verifier.verify(Buffer.concat(chunks).toString('utf8'), {
          'webhook-id': id,
          'webhook-timestamp': String(req.headers['webhook-timestamp'] ?? ''),
          'webhook-signature': String(req.headers['webhook-signature'] ?? ''),
        })
      } catch {
        rx.badSignatures++
      }
      if (id) {
        rx.counts.set(id, (rx.counts.get(id) ?? 0) + 1)
        if (!rx.firstArrival.has(id)) rx.firstArrival.set(id, at)
      }
      res.statusCode = 204
      res.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  rx.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return rx
}
