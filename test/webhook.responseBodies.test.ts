/**
 * Webhook response bodies are shown to operators and admins only. A receiver
 * that echoes a secret transformed (reversed, upper-cased, base64) gets past
 * scrubbing, which can only recognise the forms it knows; so viewers get a
 * webhook step's result as status and size without the body, and every quote
 * of a response body in lastError (step and run) and the run log withheld.
 */
import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sleep } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const SECRET = `tr-${randomBytes(12).toString('hex')}`
process.env.SHOWRUNNER_SECRET_TRANSFORM = SECRET
const TRANSFORMED = [
  [...SECRET].reverse().join(''),
  SECRET.toUpperCase(),
  Buffer.from(SECRET).toString('base64'),
]

let s: TestServer
let receiver: Server
let origin: string
beforeAll(async () => {
  // /ok answers 200, /fail 400 (not retried); both echo the Authorization header transformed.
  receiver = createServer((req, res) => {
    const token = String(req.headers.authorization ?? '').replace(/^Bearer /, '')
    res.writeHead(req.url === '/fail' ? 400 : 200, { 'content-type': 'text/plain' })
    res.end(
      `${[...token].reverse().join('')} ${token.toUpperCase()} ${Buffer.from(token).toString('base64')}`,
    )
  })
  receiver.listen(0, '127.0.0.1')
  await new Promise((r) => receiver.once('listening', r))
  origin = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${origin}/` } })
})
afterAll(async () => {
  await s?.close()
  receiver?.closeAllConnections()
  await new Promise((r) => receiver?.close(r))
})

const QUERY = `query ($id: ID!) { run(id: $id) { status lastError
  steps { kind status lastError result } logs(limit: 100) { message } } }`

describe('webhook response bodies', () => {
  it('viewers see status and size, operators and admins the body; transformed echoes reach no viewer', async () => {
    const hook = (path: string, onError: string) => ({
      kind: 'core.webhook',
      retry: { attempts: 1 },
      onError,
      params: { url: `${origin}${path}`, headers: { Authorization: 'Bearer {{secret.TRANSFORM}}' } },
    })
    const program = { phases: [{ name: 'main', steps: [hook('/ok', 'fail'), hook('/fail', 'fail')] }] }
    const created = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "bodies", title: "Bodies", program: $p }) { id } }',
      { variables: { p: program } },
    )
    expect(created.body.errors).toBeUndefined()
    const started = await s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
      { variables: { d: created.body.data!.createDefinition.id }, auth: 'operator' },
    )
    const id = started.body.data!.startRun.id
    type Run = {
      status: string
      lastError: string | null
      steps: {
        status: string
        lastError: string | null
        result: { status: number; body: string; bodyBytes?: number } | null
      }[]
      logs: { message: string }[]
    }
    let run: Run | undefined
    for (let i = 0; i < 200 && run?.status !== 'FAILED'; i++) {
      await sleep(50)
      run = (await s.gql<{ run: Run }>(QUERY, { variables: { id }, auth: 'viewer' })).body.data?.run
    }
    expect(run?.status).toBe('FAILED')
    const viewerText = JSON.stringify(run)
    for (const form of TRANSFORMED) expect(viewerText).not.toContain(form)
    expect(run!.steps[0]!.result).toEqual({
      status: 200,
      body: '[response body: operators and admins only]',
      bodyBytes: Buffer.byteLength(TRANSFORMED.join(' ')),
    })
    expect(run!.steps[1]!.lastError).toMatch(
      /answered HTTP 400: \[response body: operators and admins only\]$/,
    )
    expect(run!.lastError).toMatch(/answered HTTP 400: \[response body: operators and admins only\]/)
    expect(
      run!.logs.some((l) =>
        l.message.includes('answered HTTP 400: [response body: operators and admins only]'),
      ),
    ).toBe(true)

    for (const auth of ['operator', 'admin'] as const) {
      const seen = (await s.gql<{ run: Run }>(QUERY, { variables: { id }, auth })).body.data!.run
      // What scrubbing cannot promise: a transformed echo is stored as the receiver sent it.
      expect(seen.steps[0]!.result?.body).toBe(TRANSFORMED.join(' '))
      expect(seen.steps[1]!.lastError).toContain(TRANSFORMED[0])
    }
  })
})
