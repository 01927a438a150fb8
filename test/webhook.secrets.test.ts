/**
 * Webhook secrets and the SSRF guard on resolved addresses.
 *
 * A `{{secret.NAME}}` in a webhook's url, headers and body reaches the receiver
 * resolved from SHOWRUNNER_SECRET_NAME, and the value appears nowhere else:
 * not in any column of any table, not in a process log line, not in an API
 * answer, even when the receiver echoes it back in a result or an error body.
 * Literal header values are shown to admins only. A hostname on the allow-list
 * that resolves to the loopback is refused unless the list names the IP.
 */
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLogger } from '../src/log.ts'
import { SecretScope } from '../src/runner/secrets.ts'
import { StepFailure } from '../src/runner/steps/types.ts'
import { webhookStep } from '../src/runner/steps/webhook.ts'
import { renderTemplate } from '../src/runner/template.ts'
import { captureLog } from './helpers/logCapture.ts'
import { sleep } from './helpers/runnerHarness.ts'
import { type GqlResponse, startTestServer, type TestServer } from './helpers/server.ts'
import { makeStepContext } from './helpers/stepContext.ts'

const SECRET = `sk-${randomBytes(16).toString('hex')}`
process.env.SHOWRUNNER_SECRET_HOOK_TOKEN = SECRET

interface Seen {
  method: string
  url: string
  headers: IncomingMessage['headers']
  body: string
}

/** A receiver that records each request and echoes it back: /ok with 200, /fail with 500. */
async function startSink(): Promise<{ server: Server; origin: string; port: number; seen: Seen[] }> {
  const seen: Seen[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const call = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      }
      seen.push(call)
      res.writeHead(req.url?.startsWith('/fail') ? 500 : 200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(call))
    })
  })
  server.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const port = (server.address() as AddressInfo).port
  return { server, origin: `http://127.0.0.1:${port}`, port, seen }
}

let sink: Awaited<ReturnType<typeof startSink>>
beforeAll(async () => {
  sink = await startSink()
})
afterAll(async () => {
  sink.server.closeAllConnections()
  await new Promise((resolve) => sink.server.close(resolve))
})

describe('secrets through the runner and the API', () => {
  let server: TestServer
  const log = captureLog()
  beforeAll(async () => {
    server = await startTestServer({
      runner: true,
      env: { WEBHOOK_ALLOW: `${sink.origin}/` },
      deps: { logger: createLogger({ level: 'debug', destination: log.stream }) },
    })
  })
  afterAll(async () => {
    await server?.close()
  })

  const webhook = (extra: Record<string, unknown>) => ({
    kind: 'core.webhook',
    retry: { attempts: 1 },
    onError: 'degrade',
    ...extra,
  })

  it('resolves at run time, reaches the receiver, and is nowhere in the database, the logs or an answer', async () => {
    const program = {
      phases: [
        {
          name: 'main',
          steps: [
            webhook({
              params: {
                url: `${sink.origin}/ok?key={{secret.HOOK_TOKEN}}`,
                headers: { Authorization: 'Bearer {{secret.HOOK_TOKEN}}', 'X-Api-Key': 'literal-key-123' },
                body: { token: '{{ secret.HOOK_TOKEN }}', title: '{{definition.title}}' },
              },
            }),
            webhook({
              params: {
                url: `${sink.origin}/fail`,
                headers: { Authorization: 'Bearer {{secret.HOOK_TOKEN}}' },
              },
            }),
            webhook({
              params: {
                url: `${sink.origin}/ok`,
                headers: { Authorization: 'Bearer {{secret.NOT_SET_ANYWHERE}}' },
              },
            }),
            // Its host comes from the run's params, so publishing cannot refuse it (only the run
            // knows where it goes); the run-time refusal must still leave the secret out.
            webhook({ params: { url: 'http://{{params.refusedHost}}:9/x?token={{secret.HOOK_TOKEN}}' } }),
          ],
        },
      ],
    }
    const created = await server.gql<{ createDefinition: { id: string } }>(
      `mutation($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
      { variables: { input: { slug: `secret-${Date.now()}`, title: 'Secret show', program } } },
    )
    expect(created.body.errors).toBeUndefined()
    const definitionId = created.body.data!.createDefinition.id
    const started = await server.gql<{ startRun: { id: string } }>(
      `mutation($id: ID!, $params: JSON) { startRun(definitionId: $id, params: $params) { id } }`,
      { variables: { id: definitionId, params: { refusedHost: '127.0.0.2' } }, auth: 'operator' },
    )
    expect(started.body.errors).toBeUndefined()
    const runId = started.body.data!.startRun.id

    const query = `query($id: ID!) { run(id: $id) {
      status health lastError
      steps { kind params status lastError result }
      logs(limit: 500) { message data }
      version { program }
      definition { currentVersion { program } versions { program } }
    } }`
    let answer = { body: {} } as GqlResponse<{ run?: unknown }>
    for (let i = 0; i < 200; i++) {
      answer = await server.gql<{ run?: unknown }>(query, { variables: { id: runId } })
      if ((answer.body.data?.run as { status?: string } | undefined)?.status === 'COMPLETED') break
      await sleep(50)
    }
    const run = answer.body.data!.run as {
      status: string
      steps: {
        params: { headers?: Record<string, string> }
        status: string
        lastError: string | null
        result: unknown
      }[]
    }
    expect(run.status).toBe('COMPLETED')

    // The receiver got the resolved value in the URL, the header and the body.
    const ok = sink.seen.find((s) => s.url.startsWith('/ok?key='))
    expect(ok?.url).toBe(`/ok?key=${SECRET}`)
    expect(ok?.headers.authorization).toBe(`Bearer ${SECRET}`)
    expect(JSON.parse(ok?.body ?? '{}')).toMatchObject({ token: SECRET, title: 'Secret show' })
    expect(sink.seen.find((s) => s.url === '/fail')?.headers.authorization).toBe(`Bearer ${SECRET}`)

    // The echo is scrubbed from the result and from the error text.
    const [sent, failed, missing, refused] = run.steps
    expect(sent?.status).toBe('COMPLETED')
    expect(JSON.stringify(sent?.result)).toContain('[secret.HOOK_TOKEN]')
    expect(failed?.lastError).toMatch(/answered HTTP 500/)
    expect(failed?.lastError).toContain('[secret.HOOK_TOKEN]')
    expect(missing?.lastError).toBe(
      'secret NOT_SET_ANYWHERE is not set: set the environment variable SHOWRUNNER_SECRET_NOT_SET_ANYWHERE on every runner instance',
    )
    // The refused URL is named (its query elided), the allow-list is not.
    expect(refused?.lastError).toBe(
      'webhook refused: http://127.0.0.2:9/x?… is not in the webhook allow-list (WEBHOOK_ALLOW)',
    )
    expect(sink.seen.some((s) => s.headers.authorization?.includes('NOT_SET'))).toBe(false)

    // Admins read the program as written: references and literals.
    expect(sent?.params.headers).toEqual({
      Authorization: 'Bearer {{secret.HOOK_TOKEN}}',
      'X-Api-Key': 'literal-key-123',
    })
    expect(JSON.stringify(answer.body)).not.toContain(SECRET)

    // Every column of every table.
    const db = server.t.db
    const columns = await db.query<{ t: string; c: string }>(
      `SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = DATABASE()`,
    )
    expect(columns.length).toBeGreaterThan(20)
    for (const { t, c } of columns) {
      const [hit] = await db.query<{ n: number }>(
        `SELECT COUNT(*) AS n FROM \`${t}\` WHERE CAST(\`${c}\` AS CHAR) LIKE ?`,
        [`%${SECRET}%`],
      )
      expect({ table: t, column: c, rows: Number(hit?.n) }).toEqual({ table: t, column: c, rows: 0 })
    }
    // Every process log line (debug level).
    expect(JSON.stringify(log.lines)).not.toContain(SECRET)

    // Viewers and operators see header values redacted, in the program and in the steps.
    for (const auth of ['viewer', 'operator'] as const) {
      const seenBy = await server.gql(query, { variables: { id: runId }, auth })
      const r = seenBy.body.data!.run as {
        steps: { params: { headers?: Record<string, string> } }[]
        version: { program: { phases: { steps: { params: { headers?: Record<string, string> } }[] }[] } }
      }
      expect(r.steps[0]?.params.headers).toEqual({ Authorization: '[redacted]', 'X-Api-Key': '[redacted]' })
      expect(r.version.program.phases[0]?.steps[0]?.params.headers).toEqual({
        Authorization: '[redacted]',
        'X-Api-Key': '[redacted]',
      })
      // (The sink echoes every header into its answer, and that answer is the step's
      // result: only secrets are scrubbed from it, which is why credentials belong there.)
      expect(JSON.stringify([r.steps.map((s) => s.params), r.version])).not.toContain('literal-key-123')
      // The URL and body stay readable.
      expect(r.steps[0]?.params).toMatchObject({ url: `${sink.origin}/ok?key={{secret.HOOK_TOKEN}}` })
    }
    const asAdmin = await server.gql(query, { variables: { id: runId }, auth: 'admin' })
    expect(JSON.stringify(asAdmin.body)).toContain('literal-key-123')
  })

  it('refuses at publish: a secret outside a webhook, or a bad secret name', async () => {
    const res = await server.gql(
      `mutation($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
      {
        variables: {
          input: {
            slug: `bad-secret-${Date.now()}`,
            title: 'x',
            program: {
              phases: [
                {
                  name: 'main',
                  steps: [
                    { kind: 'core.log', params: { message: 'token {{secret.HOOK_TOKEN}}' } },
                    {
                      kind: 'core.webhook',
                      params: { url: `${sink.origin}/ok`, headers: { A: '{{secret.lower-case}}' } },
                    },
                  ],
                },
              ],
            },
          },
        },
      },
    )
    const message = res.body.errors?.[0]?.message ?? ''
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(message).toMatch(/secrets may be used only in the params of a step kind that accepts them/)
    expect(message).toMatch(/a secret's name is A-Z, 0-9 and _/)
  })
})

describe('the allow-list checks the address a hostname resolves to', () => {
  const fail = async (url: string, allow: string[]): Promise<StepFailure> => {
    const err = await webhookStep
      .execute(makeStepContext({ url, body: { a: 1 } }, { webhookAllow: allow }))
      .then(
        () => null,
        (e: unknown) => e,
      )
    expect(err).toBeInstanceOf(StepFailure)
    return err as StepFailure
  }

  it('refuses a listed DNS name that resolves to the loopback; nothing is sent', async () => {
    const before = sink.seen.length
    const err = await fail(`http://localhost:${sink.port}/ok`, [`http://localhost:${sink.port}/`])
    expect(err.retryable).toBe(false)
    expect(err.message).toMatch(
      new RegExp(
        `^webhook refused: http://localhost:${sink.port}/ok: localhost resolves to (127\\.0\\.0\\.1|::1), a loopback address; only an allow-list entry naming that IP address and port ${sink.port} allows it$`,
      ),
    )
    expect(sink.seen.length).toBe(before)
  })

  it('checks every redirect the same way: a listed name that resolves to an unlisted loopback is refused', async () => {
    // The first hop is an allowed IP literal (127.0.0.2, on the loopback); it redirects to a listed name.
    const redirector = createServer((_req, res) => {
      res.writeHead(302, { Location: `http://localhost:${sink.port}/ok` })
      res.end()
    })
    redirector.listen(0, '127.0.0.2')
    await new Promise((resolve) => redirector.once('listening', resolve))
    const hop = `http://127.0.0.2:${(redirector.address() as AddressInfo).port}`
    try {
      const before = sink.seen.length
      const err = await fail(`${hop}/start`, [`${hop}/`, `http://localhost:${sink.port}/`])
      expect(err.message).toMatch(
        new RegExp(
          `^webhook redirect 1 refused: http://localhost:${sink.port}/ok: localhost resolves to (127\\.0\\.0\\.1|::1), a loopback address`,
        ),
      )
      expect(sink.seen.length).toBe(before)
    } finally {
      redirector.closeAllConnections()
      await new Promise((resolve) => redirector.close(resolve))
    }
  })

  it('allows an internal address the allow-list names as an IP literal (directly, or behind a listed name)', async () => {
    const direct = await webhookStep.execute(
      makeStepContext({ url: `${sink.origin}/ok` }, { webhookAllow: [`${sink.origin}/`] }),
    )
    expect(direct).toMatchObject({ type: 'completed', result: { status: 200 } })
    const named = await webhookStep.execute(
      makeStepContext(
        { url: `http://localhost:${sink.port}/ok` },
        // localhost may resolve to both loopbacks; the list names them both.
        { webhookAllow: [`http://localhost:${sink.port}/`, `${sink.origin}/`, `http://[::1]:${sink.port}/`] },
      ),
    )
    expect(named).toMatchObject({ type: 'completed', result: { status: 200 } })
  })
  it('exempts an internal address by (address, port): the loopback allowed on one port does not open another', async () => {
    // The case: a listed name (here localhost) on one port, and the loopback listed on another.
    const other = createServer((_req, res) => res.end('other'))
    other.listen(0, '127.0.0.1')
    await new Promise((resolve) => other.once('listening', resolve))
    const otherPort = (other.address() as AddressInfo).port
    try {
      const before = sink.seen.length
      const allow = [
        `http://localhost:${sink.port}/`,
        `http://127.0.0.1:${otherPort}/`,
        `http://[::1]:${otherPort}/`,
      ]
      const err = await fail(`http://localhost:${sink.port}/ok`, allow)
      expect(err.message).toMatch(
        new RegExp(
          `localhost resolves to (127\\.0\\.0\\.1|::1), a loopback address; only an allow-list entry naming that IP address and port ${sink.port} allows it$`,
        ),
      )
      expect(sink.seen.length).toBe(before)
      // The same address on the port it is listed with passes.
      const ok = await webhookStep.execute(
        makeStepContext(
          { url: `http://localhost:${otherPort}/` },
          { webhookAllow: [`http://localhost:${otherPort}/`, ...allow] },
        ),
      )
      expect(ok).toMatchObject({ type: 'completed', result: { status: 200, body: 'other' } })
    } finally {
      other.closeAllConnections()
      await new Promise((resolve) => other.close(resolve))
    }
  })
})

describe('SecretScope', () => {
  it('a value rendered into a template never becomes a secret reference', () => {
    const rendered = renderTemplate(
      { body: { note: 'from {{params.note}}' } },
      {
        run: { id: 1, scope: '', scheduledFor: new Date('2025-01-01T00:00:00.000Z') },
        params: { note: '{{secret.HOOK_TOKEN}} and {{ secret.HOOK_TOKEN }}' },
        definition: { title: 't' },
      },
    )
    const sent = new SecretScope({ SHOWRUNNER_SECRET_HOOK_TOKEN: SECRET }).resolve(rendered)
    expect(JSON.stringify(sent)).not.toContain(SECRET)
    expect(sent).toEqual({ body: { note: 'from { {secret.HOOK_TOKEN}} and { { secret.HOOK_TOKEN }}' } })
  })

  it('scrubs raw, URL-encoded and JSON-escaped forms; unknown names fail without a value', () => {
    const scope = new SecretScope({ SHOWRUNNER_SECRET_ODD: 'a b/"c"' })
    expect(scope.resolve({ h: 'x {{secret.ODD}} y' })).toEqual({ h: 'x a b/"c" y' })
    expect(scope.scrub('raw a b/"c" url a%20b%2F%22c%22 json a b/\\"c\\" done')).toBe(
      'raw [secret.ODD] url [secret.ODD] json [secret.ODD] done',
    )
    expect(() => scope.resolve('{{secret.NOPE}}')).toThrow(
      'secret NOPE is not set: set the environment variable SHOWRUNNER_SECRET_NOPE on every runner instance',
    )
  })
})
