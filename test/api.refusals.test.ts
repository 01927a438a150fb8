/**
 * Refused authentication and authorisation leave a trace: a warn line with the
 * actor (role#hash, or "anonymous") and the operation name, on HTTP and on
 * WebSocket, never the token; a refused authorisation is also in the audit
 * table, once per operation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as audit from '../sql/auditLog.ts'
import { tokenActor } from '../src/auth.ts'
import { createLogger } from '../src/log.ts'
import { captureLog } from './helpers/logCapture.ts'
import { eventually, startTestServer, type TestServer, TOKENS, wsClient } from './helpers/server.ts'

const log = captureLog()
let s: TestServer
beforeAll(async () => {
  s = await startTestServer({ deps: { logger: createLogger({ level: 'info', destination: log.stream }) } })
})
afterAll(async () => {
  await s?.close()
})

const GUESS = 'guessed-token-never-logged-4242'
const allLogText = () => JSON.stringify(log.lines)
const refusals = (msg: string) => log.lines.filter((l) => l.level === 'warn' && l.msg === msg)

describe('refused authentication', () => {
  it('HTTP without a token: warn, anonymous, the operation name', async () => {
    const res = await s.gql('query NoToken { __typename }', { auth: null })
    expect(res.status).toBe(401)
    const line = await eventually(() =>
      refusals('refused authentication').find((l) => l.operationName === 'NoToken'),
    )
    expect(line).toMatchObject({ actor: 'anonymous', transport: 'http', credential: 'none' })
  })

  it('HTTP with a wrong token: warn, anonymous, and the token appears nowhere', async () => {
    const res = await s.gql('{ __typename }', {
      auth: { raw: GUESS },
      headers: {},
    })
    expect(res.status).toBe(401)
    const body = JSON.stringify({ query: 'query Guess { __typename }', operationName: 'Guess' })
    await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${GUESS}` },
      body,
    })
    const line = await eventually(() =>
      refusals('refused authentication').find((l) => l.operationName === 'Guess'),
    )
    expect(line).toMatchObject({ actor: 'anonymous', transport: 'http', credential: 'unknown token' })
    expect(allLogText()).not.toContain(GUESS)
  })

  it('WebSocket with a wrong token: warn, anonymous, the token appears nowhere', async () => {
    const closed: number[] = []
    const client = wsClient(s, { raw: GUESS }, (e) => closed.push(e.code))
    await new Promise<void>((resolve) => {
      client.subscribe(
        { query: '{ __typename }' },
        { next() {}, error: () => resolve(), complete: () => resolve() },
      )
    })
    await client.dispose()
    const line = await eventually(() =>
      refusals('refused authentication').find((l) => l.transport === 'websocket'),
    )
    expect(line).toMatchObject({ actor: 'anonymous', credential: 'unknown token' })
    expect(closed).toContain(4401)
    expect(allLogText()).not.toContain(GUESS)
  })
})

describe('refused authorisation', () => {
  const viewer = tokenActor('viewer', TOKENS.viewer)

  it('HTTP: warn with actor and operation name, one audit row however many fields were refused', async () => {
    const fields = Array.from(
      { length: 5 },
      (_, i) => `a${i}: setDefinitionState(id: "${i + 1}", state: ARCHIVED) { id }`,
    ).join(' ')
    const res = await s.gql(`mutation Sneaky { ${fields} }`, { auth: 'viewer' })
    expect(res.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const line = await eventually(() =>
      refusals('refused authorisation').find((l) => l.operationName === 'Sneaky'),
    )
    expect(line).toMatchObject({ actor: viewer, role: 'viewer', needed: 'admin' })
    expect(allLogText()).not.toContain(TOKENS.viewer)
    const rows = await eventually(async () => {
      const r = (await audit.list(s.t.db, { targetType: 'api' })).filter(
        (row) => (row.detail as { operationName?: string })?.operationName === 'Sneaky',
      )
      return r.length > 0 ? r : null
    })
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      actor: viewer,
      action: 'Mutation.setDefinitionState',
      outcome: 'refused',
    })
  })

  it('WebSocket: the same warn line', async () => {
    const client = wsClient(s, 'viewer')
    const errors = await new Promise<unknown>((resolve) => {
      client.subscribe(
        { query: 'mutation OverWs { setDefinitionState(id: "1", state: ARCHIVED) { id } }' },
        { next: (e) => resolve(e.errors), error: resolve, complete: () => {} },
      )
    })
    await client.dispose()
    expect(JSON.stringify(errors)).toMatch(/FORBIDDEN/)
    const line = await eventually(() =>
      refusals('refused authorisation').find((l) => l.operationName === 'OverWs'),
    )
    expect(line).toMatchObject({ actor: viewer })
  })
})
