/**
 * GraphQL over HTTP through the real server: spec conformance (graphql-http's
 * audits), the probes, GraphiQL, CSRF, body and query limits, error masking,
 * and the no-token start-up.
 */
import { serverAudits } from 'graphql-http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { buildApp } from '../src/server.ts'
import { createTestDb } from './helpers/db.ts'
import { leakProblems, SESSION_PROGRAM, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(async () => {
  await s?.close()
})

describe('GraphQL over HTTP', () => {
  it('passes every MUST of the graphql-http server audits', async () => {
    const fetchFn = (input: RequestInfo | URL, init: RequestInit = {}) => {
      const headers = new Headers(init.headers)
      headers.set('authorization', `Bearer ${TOKENS.viewer}`)
      return fetch(input, { ...init, headers })
    }
    const audits = serverAudits({ url: s.graphqlUrl, fetchFn })
    const failures: string[] = []
    let musts = 0
    for (const audit of audits) {
      if (!audit.name.startsWith('MUST')) continue
      musts++
      const result = await audit.fn()
      if (result.status !== 'ok') failures.push(`${audit.name}: ${result.reason}`)
    }
    expect(musts).toBeGreaterThan(10)
    expect(failures).toEqual([])
  })

  it('answers GET queries and refuses mutations over GET', async () => {
    const q = encodeURIComponent('{ definitions { id } }')
    const ok = await fetch(`${s.graphqlUrl}?query=${q}`, {
      headers: { authorization: `Bearer ${TOKENS.viewer}`, accept: 'application/json' },
    })
    expect(ok.status).toBe(200)
    expect(await ok.json()).toEqual({ data: { definitions: [] } })
    const m = encodeURIComponent('mutation { pauseRun(id: "1") { applied } }')
    const refused = await fetch(`${s.graphqlUrl}?query=${m}`, {
      headers: { authorization: `Bearer ${TOKENS.admin}`, accept: 'application/json' },
    })
    expect(refused.status).toBe(405)
  })

  it('runs the operation operationName names, each time, in a document that holds several', async () => {
    const document = 'query Health { health { database } } query Defs { definitions { id } }'
    const post = async (operationName: string) => {
      const r = await fetch(s.graphqlUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKENS.viewer}`, 'content-type': 'application/json' },
        body: JSON.stringify({ query: document, operationName }),
      })
      return r.json()
    }
    // In turn and again: compiled queries are cached, per operation and not per document.
    for (let i = 0; i < 2; i++) {
      expect(await post('Health')).toEqual({ data: { health: { database: true } } })
      expect(await post('Defs')).toEqual({ data: { definitions: [] } })
    }
    const get = await fetch(`${s.graphqlUrl}?query=${encodeURIComponent(document)}&operationName=Defs`, {
      headers: { authorization: `Bearer ${TOKENS.viewer}`, accept: 'application/json' },
    })
    expect(await get.json()).toEqual({ data: { definitions: [] } })
  })

  it('serves GraphiQL to browsers without a token, with a headers editor for one', async () => {
    const res = await fetch(s.graphqlUrl, { headers: { accept: 'text/html' } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/text\/html/)
    const html = await res.text()
    expect(html).toContain('showrunner GraphiQL')
    // Where the token goes, but no placeholder token that would be sent (and refused) on open.
    expect(html).not.toContain('PASTE-YOUR-TOKEN-HERE')
    expect(html).toContain('Put your token in the Headers tab below')
    expect(html).toMatch(/isHeadersEditorEnabled"?\s*:\s*true/)
  })

  it('a resolver error reaches the client with its message and code (one copy of graphql)', async () => {
    const r = await s.gql(
      `mutation ($program: JSON!) { createDefinition(input: { slug: "bad-cron", title: "Bad", schedule: "61 * * * *", program: $program }) { id } }`,
      { variables: { program: SESSION_PROGRAM } },
    )
    expect(r.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(r.body.errors?.[0]?.message).toMatch(/schedule: "61 \* \* \* \*" is not a valid cron expression/)
    expect(leakProblems(r.body)).toEqual([])
  })

  it('refuses cross-site-able POSTs (form, text/plain) without the CSRF header; JSON POSTs pass', async () => {
    const form = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Bearer ${TOKENS.admin}`,
      },
      body: 'query=%7B%20definitions%20%7B%20id%20%7D%20%7D',
    })
    expect(form.status).toBe(403)
    const text = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', authorization: `Bearer ${TOKENS.admin}` },
      body: JSON.stringify({ query: '{ definitions { id } }' }),
    })
    expect(text.status).toBe(403)
    const body = (await text.json()) as { errors: { message: string }[] }
    expect(body.errors[0]?.message).toMatch(/x-graphql-yoga-csrf/)
    const withHeader = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'x-graphql-yoga-csrf': '1',
        authorization: `Bearer ${TOKENS.admin}`,
      },
      body: 'query=%7B%20definitions%20%7B%20id%20%7D%20%7D',
    })
    expect(withHeader.status).toBe(200)
    const json = await s.gql('{ definitions { id } }')
    expect(json.status).toBe(200)
  })

  it('rejects bodies over MAX_BODY_BYTES with 413, declared or chunked', async () => {
    const big = JSON.stringify({ query: `{ definitions { id } } # ${'x'.repeat(s.config.maxBodyBytes)}` })
    const declared = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKENS.admin}` },
      body: big,
    })
    expect(declared.status).toBe(413)
    const chunks = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big))
        controller.close()
      },
    })
    const chunked = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKENS.admin}` },
      body: chunks,
      duplex: 'half',
    } as RequestInit)
    expect(chunked.status).toBe(413)
  })

  it('bounds query depth and cost, but lets introspection through', async () => {
    // runs → steps → run → steps → … : 12 levels, over the limit of 10.
    const levels = ['runs', ...Array.from({ length: 11 }, (_, i) => (i % 2 === 0 ? 'steps' : 'run'))]
    const deep = `{ ${levels.map((f) => `${f} {`).join(' ')} id ${'} '.repeat(levels.length)}}`
    const r = await s.gql(deep, { auth: 'viewer' })
    expect(r.status).toBe(400)
    expect(r.body.errors?.[0]?.message).toMatch(/depth/i)
    expect(r.body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED')
    const wide = `{ ${Array.from({ length: 20 }, (_, i) => `a${i}: runs(limit: 500) { id scope status health steps { id kind } }`).join(' ')} }`
    const costly = await s.gql(wide, { auth: 'viewer' })
    expect(costly.status).toBe(400)
    expect(costly.body.errors?.[0]?.message).toMatch(/cost/i)
    const intro = await s.gql(
      '{ __schema { types { name fields { name type { name ofType { name ofType { name ofType { name ofType { name } } } } } } } } }',
      { auth: 'viewer' },
    )
    expect(intro.status).toBe(200)
    expect(JSON.stringify(intro.body.data)).toContain('EventRun')
  })
})

describe('probes', () => {
  it('/healthz is up with no token and no data', async () => {
    const res = await fetch(`${s.url}/healthz`)
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ ok: true })
  })

  it('/readyz is 200 when the database answers and migrations are current', async () => {
    const res = await fetch(`${s.url}/readyz`)
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ ok: true, database: true, pendingMigrations: 0, reasons: [] })
  })

  it('/metrics is Prometheus text with request, resolver, tick, runs-by-status, claim and subscription series', async () => {
    await s.gql('{ runs { id } }', { auth: 'viewer' })
    const res = await fetch(`${s.url}/metrics`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/text\/plain/)
    const text = await res.text()
    for (const name of [
      'showrunner_http_request_duration_seconds_bucket{',
      'showrunner_resolver_duration_seconds_bucket{',
      'showrunner_tick_duration_seconds',
      'showrunner_runs_by_status{status="running"} 0',
      'showrunner_claim_conflicts_total',
      'showrunner_open_subscriptions 0',
    ]) {
      expect(text).toContain(name)
    }
    expect(text).toMatch(/showrunner_resolver_duration_seconds_count\{field="Query.runs"\} [1-9]/)
    expect(text).toMatch(/route="\/graphql"/)
  })

  it('unknown paths are 404 and probes refuse other methods', async () => {
    expect((await fetch(`${s.url}/nope`)).status).toBe(404)
    expect((await fetch(`${s.url}/healthz`, { method: 'POST' })).status).toBe(405)
  })
})

describe('start-up without tokens', () => {
  it('generates one admin token, prints it once, binds 127.0.0.1 only', async () => {
    const t = await createTestDb()
    const printed: string[] = []
    const config = loadConfig({
      PORT: '0',
      HOST: '0.0.0.0',
      DATABASE_URL: t.url,
      RUNNER: 'off',
      LOG_LEVEL: 'silent',
    })
    const app = buildApp(config, {
      logger: silentLogger(),
      out: { write: (text: string) => printed.push(text) },
    })
    try {
      const started = await app.start()
      expect(started.host).toBe('127.0.0.1')
      const token = app.generatedToken
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/)
      const lines = printed
        .join('')
        .split('\n')
        .filter((l) => l.includes(String(token)))
      expect(lines).toEqual([`  Authorization: Bearer ${token}`])
      const res = await fetch(`${started.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query: 'mutation { setDefinitionState(id: "999", state: PAUSED) { id } }' }),
      })
      const body = (await res.json()) as { errors: { extensions: { code: string } }[] }
      // An admin field reached its resolver (NOT_FOUND), so the token is an admin's.
      expect(body.errors[0]?.extensions.code).toBe('NOT_FOUND')
    } finally {
      await app.stop()
      await t.drop()
    }
  })
})
