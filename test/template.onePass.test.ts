/**
 * Templates render in one pass: a rendered value is never parsed again, so a
 * secret reference comes only from the published program text. Values joined
 * with each other or with the text around them cannot make one:
 * `{{params.a}}{{params.b}}` with a = "{" and b = "{secret.HOOK}}",
 * `{{run.scope}}{{params.n}}` with a scope of "{", `{{{params.x}}}` with
 * x = "{secret.HOOK}". Checked on the renderer and through the runner against
 * a receiver that records what it is sent.
 */
import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SecretScope } from '../src/runner/secrets.ts'
import { renderTemplate } from '../src/runner/template.ts'
import { sleep } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const SECRET = `hk-${randomBytes(12).toString('hex')}`
process.env.SHOWRUNNER_SECRET_ONEPASS = SECRET

const vars = (params: Record<string, unknown>, scope = '') => ({
  run: { id: 1, scope, scheduledFor: new Date('2025-01-01T00:00:00.000Z') },
  params,
  definition: { title: 't' },
})
const resolve = (value: unknown) => new SecretScope({ SHOWRUNNER_SECRET_ONEPASS: SECRET }).resolve(value)

describe('the renderer', () => {
  it.each([
    ['{{params.a}}{{params.b}}', vars({ a: '{', b: '{secret.ONEPASS}}' })],
    ['{{params.a}}{{params.b}}', vars({ a: '{{', b: 'secret.ONEPASS}}' })],
    ['{{run.scope}}{{params.n}}', vars({ n: '{secret.ONEPASS}}' }, '{')],
    ['{{{params.x}}}', vars({ x: '{secret.ONEPASS}' })],
    ['{{{params.x}}}', vars({ x: '{ secret.ONEPASS }' })],
    ['{{params.a}}secret.ONEPASS}}', vars({ a: '{{' })],
    ['{{params.note}}', vars({ note: '{{secret.ONEPASS}}' })],
    ['{{params.a}}{{params.b}}{{params.c}}', vars({ a: '{', b: '{', c: 'secret.ONEPASS}}' })],
  ])('%s with %j resolves no secret', (template, v) => {
    const rendered = renderTemplate({ url: `http://h/?q=${template}` }, v)
    const sent = resolve(rendered)
    expect(JSON.stringify(sent)).not.toContain(SECRET)
  })

  it("the program's own references still resolve, next to values that try to forge one", () => {
    const rendered = renderTemplate('{{params.a}}{{secret.ONEPASS}}{{params.b}}', vars({ a: '{', b: '}}' }))
    expect(resolve(rendered)).toBe(`{${SECRET}}}`)
    expect(resolve(renderTemplate('{{ secret.ONEPASS }}', vars({})))).toBe(SECRET)
  })
})

describe('through the runner', () => {
  let s: TestServer
  let receiver: Server
  let origin: string
  const seen: string[] = []
  beforeAll(async () => {
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        seen.push(`${req.url} ${JSON.stringify(req.headers)} ${Buffer.concat(chunks).toString()}`)
        res.end('ok')
      })
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

  it('joined placeholders in url, headers and body send no secret; the run completes', async () => {
    const hook = (params: Record<string, unknown>) => ({
      kind: 'core.webhook',
      retry: { attempts: 1 },
      params,
    })
    const program = {
      phases: [
        {
          name: 'main',
          steps: [
            hook({ url: `${origin}/echo?q={{params.a}}{{params.b}}`, method: 'GET' }),
            hook({ url: `${origin}/scope`, body: { s: '{{run.scope}}{{params.n}}' } }),
            hook({ url: `${origin}/x`, headers: { 'X-Echo': '{{{params.x}}}' } }),
          ],
        },
      ],
    }
    const created = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "onepass", title: "One pass", program: $p }) { id } }',
      { variables: { p: program } },
    )
    expect(created.body.errors).toBeUndefined()
    const started = await s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!, $p: JSON) { startRun(definitionId: $d, scope: "{", params: $p) { id } }',
      {
        variables: {
          d: created.body.data!.createDefinition.id,
          p: { a: '{', b: '{secret.ONEPASS}}', n: '{secret.ONEPASS}}', x: '{secret.ONEPASS}' },
        },
        auth: 'operator',
      },
    )
    expect(started.body.errors).toBeUndefined()
    let status = ''
    for (let i = 0; i < 200 && !['COMPLETED', 'FAILED'].includes(status); i++) {
      const res = await s.gql<{ run: { status: string } }>('query ($id: ID!) { run(id: $id) { status } }', {
        variables: { id: started.body.data!.startRun.id },
      })
      status = res.body.data?.run.status ?? ''
      await sleep(50)
    }
    expect(status).toBe('COMPLETED')
    expect(seen).toHaveLength(3)
    expect(seen.join('\n')).not.toContain(SECRET)
    // What was sent is the forged text, broken: `{ {secret.ONEPASS}}`.
    expect(decodeURIComponent(seen[0]!)).toContain('{ {secret.ONEPASS}}')
  })
})
