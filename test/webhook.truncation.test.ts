/**
 * Secrets are scrubbed before anything is cut. A receiver that answers padding
 * then an echo of the secret, so that the secret straddles the cut of the
 * stored result (2 KiB) or of the error snippet (200 characters), leaves no
 * part of the secret in the step's result, its lastError, the run's lastError
 * or the run log: whatever the padding, not even its first few characters.
 */
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RESPONSE_BODY_BYTES } from '../src/runner/steps/webhook.ts'
import { sleep } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const SECRET = `Zq${randomBytes(16).toString('hex')}`
process.env.SHOWRUNNER_SECRET_PAD_HOOK = SECRET

/** /pad?n=N&status=S answers N dots, then the request's Authorization header and body. */
async function startPaddingEcho(): Promise<{ server: Server; origin: string }> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x')
      const n = Number(url.searchParams.get('n') ?? 0)
      res.writeHead(Number(url.searchParams.get('status') ?? 200), { 'content-type': 'text/plain' })
      res.end(`${'.'.repeat(n)}${req.headers.authorization ?? ''} ${Buffer.concat(chunks).toString()}`)
    })
  })
  server.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}

let echo: Awaited<ReturnType<typeof startPaddingEcho>>
let s: TestServer
beforeAll(async () => {
  echo = await startPaddingEcho()
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${echo.origin}/` } })
})
afterAll(async () => {
  await s?.close()
  echo?.server.closeAllConnections()
  await new Promise((resolve) => echo?.server.close(resolve))
})

/** Every start of the secret long enough to tell: 4 characters up to all but one. */
function partsOfSecret(text: string): string[] {
  const found: string[] = []
  for (let k = 4; k <= SECRET.length; k++)
    if (text.includes(SECRET.slice(0, k))) found.push(SECRET.slice(0, k))
  return found
}

const step = (n: number, status: number) => ({
  kind: 'core.webhook',
  retry: { attempts: 1 },
  onError: 'degrade',
  params: {
    url: `${echo.origin}/pad?n=${n}&status=${status}`,
    headers: { Authorization: 'Bearer {{secret.PAD_HOOK}}' },
    body: '{{secret.PAD_HOOK}}',
  },
})

describe('scrub before truncating', () => {
  it('a secret straddling the 2 KiB result cut or the 200-character error cut leaves no part behind', async () => {
    // "Bearer " is 7 characters: each padding puts the cut somewhere inside the secret.
    const resultPads = [2010, 2020, 2030, 2035, 2038, 2039, 2040].map((n) => RESPONSE_BODY_BYTES - 2048 + n)
    const errorPads = [160, 170, 180, 185, 190, 191, 192]
    const program = {
      phases: [
        {
          name: 'main',
          steps: [...resultPads.map((n) => step(n, 200)), ...errorPads.map((n) => step(n, 400))],
        },
      ],
    }
    const created = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "pad", title: "Pad", program: $p }) { id } }',
      { variables: { p: program } },
    )
    expect(created.body.errors).toBeUndefined()
    const started = await s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
      { variables: { d: created.body.data!.createDefinition.id }, auth: 'operator' },
    )
    expect(started.body.errors).toBeUndefined()
    const query = `query ($id: ID!) { run(id: $id) { status lastError
      steps { status lastError result } logs(limit: 500) { message data } } }`
    type Run = {
      status: string
      lastError: string | null
      steps: { status: string; lastError: string | null; result: { body: string } | null }[]
    }
    let run: Run | undefined
    let raw = ''
    for (let i = 0; i < 300; i++) {
      const res = await s.gql<{ run: Run }>(query, {
        variables: { id: started.body.data!.startRun.id },
        auth: 'admin',
      })
      run = res.body.data?.run
      raw = JSON.stringify(res.body)
      if (run && ['COMPLETED', 'FAILED'].includes(run.status)) break
      await sleep(50)
    }
    expect(run?.status).toBe('COMPLETED')
    const results = run!.steps.slice(0, resultPads.length)
    const errors = run!.steps.slice(resultPads.length)
    // The receiver really answered past each cut: padding, then the scrubbed part, then an ellipsis.
    for (const r of results) {
      expect(r.status).toBe('COMPLETED')
      expect(r.result?.body.length).toBeLessThanOrEqual(RESPONSE_BODY_BYTES + 1)
      expect(r.result?.body).toMatch(/^\.{2000,}/)
    }
    for (const e of errors) expect(e.lastError).toMatch(/answered HTTP 400: \.{150,}/)
    expect(partsOfSecret(raw)).toEqual([])
    // Nothing in any column of any table either.
    const columns = await s.t.db.query<{ t: string; c: string }>(
      'SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = DATABASE()',
    )
    for (const { t, c } of columns) {
      const [hit] = await s.t.db.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM \`${t}\` WHERE CAST(\`${c}\` AS CHAR) LIKE ?`,
        [`%${SECRET.slice(0, 4)}%`],
      )
      expect({ t, c, rows: Number(hit?.n) }).toEqual({ t, c, rows: 0 })
    }
  })
})

describe('a URL cut short in a message', () => {
  it('a redirect Location echoing the secret past 200 characters leaves no start of it in the error', async () => {
    const { webhookStep } = await import('../src/runner/steps/webhook.ts')
    const { makeStepContext } = await import('./helpers/stepContext.ts')
    // Not a URL (a space in the host), echoing the token so that it straddles the 200-character cut.
    const redirector = createServer((req, res) => {
      const token = String(req.headers.authorization ?? '').replace(/^Bearer /, '')
      res.writeHead(302, { Location: `http://bad host/${'p'.repeat(170)}${token}` })
      res.end()
    })
    redirector.listen(0, '127.0.0.1')
    await new Promise((r) => redirector.once('listening', r))
    const origin = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`
    try {
      const ctx = makeStepContext(
        {
          url: `${origin}/go`,
          method: 'GET' as const,
          headers: { Authorization: 'Bearer {{secret.PAD_HOOK}}' },
        },
        { webhookAllow: [`${origin}/`] },
      )
      const err = await webhookStep.execute(ctx).then(
        () => null,
        (e: Error) => e,
      )
      expect(err?.message).toMatch(/bad redirect Location/)
      expect(partsOfSecret(err?.message ?? '')).toEqual([])
    } finally {
      redirector.closeAllConnections()
      await new Promise((r) => redirector.close(r))
    }
  })
})
