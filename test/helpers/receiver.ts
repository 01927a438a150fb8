/**
 * A real HTTP receiver on loopback for notification tests: records every
 * request (headers and raw body) and answers with the status `respond` picks.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Received {
  path: string
  headers: IncomingHttpHeaders
  body: string
  json: Record<string, unknown>
  at: number
}

export interface Receiver {
  url: string
  requests: Received[]
  /** The status for the nth request (0-based). @default 200 */
  respond: (n: number, req: Received) => number
  close(): Promise<void>
}

export async function startReceiver(): Promise<Receiver> {
  const requests: Received[] = []
  let server: Server
  const receiver: Receiver = {
    url: '',
    requests,
    respond: () => 200,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
  server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      let json: Record<string, unknown> = {}
      try {
        json = JSON.parse(body)
      } catch {}
      const got = { path: req.url ?? '/', headers: req.headers, body, json, at: Date.now() }
      const n = requests.length
      requests.push(got)
      res.statusCode = receiver.respond(n, got)
      res.end('ok')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return receiver
}
