import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import {
  allowListRefusal,
  isUrlAllowed,
  normaliseUrl,
  parseAllowList,
} from '../src/runner/steps/allowList.ts'
import { StepFailure } from '../src/runner/steps/types.ts'
import { type WebhookParams, webhookStep } from '../src/runner/steps/webhook.ts'
import { makeStepContext } from './helpers/stepContext.ts'

interface Received {
  method: string
  url: string
  headers: IncomingMessage['headers']
  body: string
}

interface Receiver {
  origin: string
  received: Received[]
  close(): Promise<void>
}

const servers: Server[] = []

/** A real HTTP server on 127.0.0.1 that records every request and answers with `handler`. */
async function receiver(
  handler: (req: Received, res: ServerResponse) => void = (_req, res) => res.end('ok'),
): Promise<Receiver> {
  const received: Received[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const r = {
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      }
      received.push(r)
      handler(r, res)
    })
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    origin: `http://127.0.0.1:${port}`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections()
    await new Promise<void>((resolve) => s.close(() => resolve()))
  }
})

function redirectTo(location: string, status = 302) {
  return (_req: Received, res: ServerResponse) => {
    res.writeHead(status, { Location: location })
    res.end('moved')
  }
}

async function call(params: WebhookParams, allow: string[], signal?: AbortSignal) {
  return webhookStep.execute(makeStepContext(params, { webhookAllow: allow, ...(signal && { signal }) }))
}

async function failure(params: WebhookParams, allow: string[], signal?: AbortSignal): Promise<StepFailure> {
  const err = await call(params, allow, signal).then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(StepFailure)
  return err as StepFailure
}

describe('core.webhook against a real receiver', () => {
  it('sends JSON with the Idempotency-Key, Content-Type and User-Agent headers', async () => {
    const hook = await receiver((_req, res) => {
      res.writeHead(201, { 'Content-Type': 'text/plain' })
      res.end('created')
    })
    const outcome = await call(
      {
        url: `${hook.origin}/chat?x=1`,
        headers: { 'X-Token': 'abc' },
        body: { content: 'Raid Night starts soon' },
      },
      [hook.origin],
    )
    expect(outcome).toEqual({ type: 'completed', result: { status: 201, body: 'created' } })
    expect(hook.received).toHaveLength(1)
    const r = hook.received[0]!
    expect(r.method).toBe('POST')
    expect(r.url).toBe('/chat?x=1')
    expect(r.headers['idempotency-key']).toBe('7-11')
    expect(r.headers['content-type']).toBe('application/json')
    expect(r.headers['user-agent']).toBe('showrunner')
    expect(r.headers['x-token']).toBe('abc')
    expect(JSON.parse(r.body)).toEqual({ content: 'Raid Night starts soon' })
  })

  it('sends no body and no Content-Type on a GET', async () => {
    const hook = await receiver()
    await call({ url: `${hook.origin}/ping`, method: 'GET' }, [hook.origin])
    const r = hook.received[0]!
    expect(r.method).toBe('GET')
    expect(r.body).toBe('')
    expect(r.headers['content-type']).toBeUndefined()
    expect(r.headers['idempotency-key']).toBe('7-11')
  })

  it('refuses a URL outside the allow-list without sending anything', async () => {
    const hook = await receiver()
    const err = await failure({ url: `${hook.origin}/x`, body: {} }, ['https://hooks.example.com/'])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(/not in the webhook allow-list/)
    const none = await failure({ url: `${hook.origin}/x` }, [])
    expect(none.message).toMatch(/WEBHOOK_ALLOW is empty/)
    expect(hook.received).toHaveLength(0)
  })

  it('blocks a redirect to a host outside the allow-list; that host receives nothing', async () => {
    const evil = await receiver()
    const hook = await receiver(redirectTo(`${evil.origin}/steal`))
    const err = await failure({ url: `${hook.origin}/x`, body: { secret: 1 } }, [hook.origin])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(
      /redirect 1 refused: .*127\.0\.0\.1:\d+\/steal is not in the webhook allow-list/,
    )
    expect(hook.received).toHaveLength(1)
    expect(evil.received).toHaveLength(0)

    // The same with a different spelling of the other host.
    const port = new URL(evil.origin).port
    const hook2 = await receiver(redirectTo(`http://localhost:${port}/steal`, 307))
    await failure({ url: `${hook2.origin}/x` }, [hook2.origin])
    expect(evil.received).toHaveLength(0)
  })

  it('follows allowed redirects, re-applying fetch method rules and dropping credentials across origins', async () => {
    const target = await receiver()
    const via302 = await receiver(redirectTo(`${target.origin}/after-302`, 302))
    const via307 = await receiver(redirectTo(`${target.origin}/after-307`, 307))
    const via303 = await receiver(redirectTo(`${target.origin}/after-303`, 303))
    const allow = [target.origin, via302.origin, via307.origin, via303.origin]
    const params = (origin: string, method: 'POST' | 'PUT') => ({
      url: `${origin}/start`,
      method,
      headers: { Authorization: 'Bearer s3cret', 'X-Keep': 'yes' },
      body: { a: 1 },
    })

    await call(params(via302.origin, 'POST'), allow)
    await call(params(via307.origin, 'POST'), allow)
    await call(params(via303.origin, 'PUT'), allow)
    const [after302, after307, after303] = target.received
    expect(after302).toMatchObject({ method: 'GET', url: '/after-302', body: '' })
    expect(after307).toMatchObject({ method: 'POST', url: '/after-307', body: '{"a":1}' })
    expect(after303).toMatchObject({ method: 'GET', url: '/after-303', body: '' })
    for (const r of [after302!, after307!, after303!]) {
      expect(r.headers.authorization).toBeUndefined()
      expect(r.headers['x-keep']).toBe('yes')
      expect(r.headers['idempotency-key']).toBe('7-11')
    }
    expect(after302!.headers['content-type']).toBeUndefined()
    expect(after307!.headers['content-type']).toBe('application/json')
    // The first hop did get the credentials.
    expect(via302.received[0]!.headers.authorization).toBe('Bearer s3cret')
  })

  it('keeps credentials on a same-origin redirect', async () => {
    const hook = await receiver((req, res) => {
      if (req.url === '/a') redirectTo('/b', 308)(req, res)
      else res.end('done')
    })
    const outcome = await call({ url: `${hook.origin}/a`, headers: { Authorization: 'Bearer t' }, body: 1 }, [
      hook.origin,
    ])
    expect(outcome).toEqual({ type: 'completed', result: { status: 200, body: 'done' } })
    expect(hook.received.map((r) => [r.method, r.url, r.headers.authorization, r.body])).toEqual([
      ['POST', '/a', 'Bearer t', '1'],
      ['POST', '/b', 'Bearer t', '1'],
    ])
  })

  it('gives up after 5 redirects', async () => {
    const hook = await receiver((req, res) => redirectTo(`/r${hook.received.length}`)(req, res))
    const err = await failure({ url: `${hook.origin}/r0`, method: 'GET' }, [hook.origin])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(/more than 5 redirects/)
    expect(hook.received).toHaveLength(6)
  })

  it('treats 5xx, 429 and 408 as retryable and other 4xx as final', async () => {
    const hook = await receiver((req, res) => {
      const status = Number(req.url!.slice(1))
      res.writeHead(status)
      res.end(`status ${status} body`)
    })
    const allow = [hook.origin]
    for (const status of [500, 502, 503, 429, 408]) {
      const err = await failure({ url: `${hook.origin}/${status}` }, allow)
      expect(err.retryable, String(status)).toBe(true)
      expect(err.message).toContain(`answered HTTP ${status}: status ${status} body`)
    }
    for (const status of [400, 401, 404, 422]) {
      const err = await failure({ url: `${hook.origin}/${status}` }, allow)
      expect(err.retryable, String(status)).toBe(false)
    }
  })

  it("aborts on the signal (the runner's timeout) with a retryable failure", async () => {
    const hook = await receiver((_req, res) => {
      const timer = setTimeout(() => res.end('too late'), 10_000)
      res.on('close', () => clearTimeout(timer))
    })
    const started = Date.now()
    const err = await failure({ url: `${hook.origin}/slow` }, [hook.origin], AbortSignal.timeout(200))
    expect(Date.now() - started).toBeLessThan(5000)
    expect(err.retryable).toBe(true)
    expect(err.message).toMatch(/timed out/)
    expect(hook.received).toHaveLength(1)
  })

  it('treats a refused connection as retryable', async () => {
    const gone = await receiver()
    await gone.close()
    const err = await failure({ url: `${gone.origin}/x` }, [gone.origin])
    expect(err.retryable).toBe(true)
    expect(err.message).toMatch(/ECONNREFUSED/)
  })

  it('reuses a kept-alive connection across attempts to one receiver, and opens a new one when it is gone', async () => {
    const hook = await receiver()
    const server = servers.at(-1) as Server
    let connections = 0
    server.on('connection', () => connections++)
    for (let i = 0; i < 20; i++) await call({ url: `${hook.origin}/again` }, [hook.origin])
    expect(hook.received).toHaveLength(20)
    // One, or two when an answer's last bytes were still being read as the next attempt began.
    expect(connections).toBeLessThanOrEqual(2)
    // The receiver drops its connections (a restart): the next attempt connects afresh and succeeds.
    const before = connections
    server.closeAllConnections()
    await new Promise((resolve) => setTimeout(resolve, 50))
    await call({ url: `${hook.origin}/again` }, [hook.origin])
    expect(hook.received).toHaveLength(21)
    expect(connections).toBe(before + 1)
  })

  it('keeps only the first 2 KiB of the response', async () => {
    const hook = await receiver((_req, res) => res.end('é'.repeat(3000)))
    const outcome = await call({ url: `${hook.origin}/big` }, [hook.origin])
    const body = (outcome as { result: { body: string } }).result.body
    expect(Buffer.byteLength(body)).toBe(2048)
    expect(body).toBe('é'.repeat(1024))
  })
})

describe('allow-list', () => {
  it('normalises URLs the way fetch does', () => {
    expect(normaliseUrl('HTTPS://Hooks.Example.COM:443/a/./b/../c#frag')).toEqual({
      ok: true,
      url: 'https://hooks.example.com/a/c',
    })
    expect(normaliseUrl('http://0x7f.0.0.1:8080/x')).toEqual({ ok: true, url: 'http://127.0.0.1:8080/x' })
    expect(normaliseUrl('ftp://a.example/')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/ftp/),
    })
    expect(normaliseUrl('https://u:p@a.example/')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/credentials/),
    })
    expect(normaliseUrl('/relative')).toMatchObject({ ok: false })
  })

  it('respects the prefix boundary', () => {
    const allow = ['https://hooks.example.com']
    expect(isUrlAllowed('https://hooks.example.com/x', allow)).toBe(true)
    expect(isUrlAllowed('https://hooks.example.com', allow)).toBe(true)
    expect(isUrlAllowed('https://HOOKS.example.com:443/x', allow)).toBe(true)
    expect(isUrlAllowed('https://hooks.example.com.evil.net/', allow)).toBe(false)
    expect(isUrlAllowed('https://hooks.example.com@evil.net/', allow)).toBe(false)
    expect(isUrlAllowed('https://hooks.example.com:8443/', allow)).toBe(false)
    expect(isUrlAllowed('http://hooks.example.com/', allow)).toBe(false)
    expect(isUrlAllowed('https://evil.net/https://hooks.example.com/', allow)).toBe(false)
  })

  it('respects path prefixes, after resolving dot segments', () => {
    const allow = ['https://a.example/api']
    expect(isUrlAllowed('https://a.example/api', allow)).toBe(true)
    expect(isUrlAllowed('https://a.example/api/hook', allow)).toBe(true)
    expect(isUrlAllowed('https://a.example/api?x=1', allow)).toBe(true)
    expect(isUrlAllowed('https://a.example/apix', allow)).toBe(false)
    expect(isUrlAllowed('https://a.example/api/../admin', allow)).toBe(false)
    expect(isUrlAllowed('https://a.example/api/%2e%2e/admin', allow)).toBe(false)
    expect(isUrlAllowed('https://a.example/api/..%2Fadmin', allow)).toBe(false)
    expect(isUrlAllowed('https://a.example/x/../api/ok', allow)).toBe(true)
    const slash = ['https://a.example/api/']
    expect(isUrlAllowed('https://a.example/api/hook', slash)).toBe(true)
    expect(isUrlAllowed('https://a.example/api', slash)).toBe(false)
  })

  it('parses WEBHOOK_ALLOW and explains bad entries', () => {
    expect(parseAllowList('https://hooks.example.com/, HTTP://127.0.0.1:8080 ,')).toEqual({
      prefixes: ['https://hooks.example.com/', 'http://127.0.0.1:8080/'],
      problems: [],
    })
    expect(parseAllowList('ftp://x, nope').problems).toEqual([
      'WEBHOOK_ALLOW entry "ftp://x" uses ftp: only http and https are allowed',
      'WEBHOOK_ALLOW entry "nope" is not an absolute URL',
    ])
    expect(parseAllowList(undefined)).toEqual({ prefixes: [], problems: [] })
    expect(allowListRefusal('https://a.example/x', ['https://a.example'])).toBeNull()
  })
})
