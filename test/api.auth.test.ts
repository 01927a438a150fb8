/**
 * The roles of docs/contract.md through the real server: every root field × {no token, wrong token,
 * viewer, operator, admin} over HTTP (subscriptions over SSE), the WebSocket
 * handshake, field-level judgement of mixed documents, and the actor recorded
 * on mutations.
 */
import { createClient } from 'graphql-ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import * as audit from '../sql/auditLog.ts'
import * as logs from '../sql/eventRunLogs.ts'
import { tokenActor } from '../src/auth.ts'
import {
  type Auth,
  eventually,
  SESSION_PROGRAM,
  sseSubscribe,
  startTestServer,
  type TestServer,
  TOKENS,
  type TokenName,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

let s: TestServer
let definitionId: string
let runId: string
let slugSeq = 0

beforeAll(async () => {
  s = await startTestServer()
  const def = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!) { createDefinition(input: { slug: "auth-fixture", title: "Auth fixture", program: $p }) { id } }',
    { variables: { p: SESSION_PROGRAM } },
  )
  definitionId = def.body.data?.createDefinition.id as string
  const run = await s.gql<{ startRun: { id: string } }>(
    `mutation { startRun(definitionId: "${definitionId}") { id } }`,
    {
      auth: 'operator',
    },
  )
  runId = run.body.data?.startRun.id as string
  expect(definitionId).toMatch(/^\d+$/)
  expect(runId).toMatch(/^\d+$/)
})
afterAll(async () => {
  await s?.close()
})

const ROLE_ORDER: TokenName[] = ['viewer', 'operator', 'admin']

interface FieldCase {
  field: string
  needs: TokenName
  doc: () => string
  subscription?: boolean
}

const MISSING = '987654321'
const FIELDS: FieldCase[] = [
  { field: 'runs', needs: 'viewer', doc: () => '{ runs { id } }' },
  { field: 'run', needs: 'viewer', doc: () => `{ run(id: "${runId}") { id } }` },
  { field: 'waitingSteps', needs: 'viewer', doc: () => '{ waitingSteps { id } }' },
  { field: 'definitions', needs: 'viewer', doc: () => '{ definitions { id } }' },
  { field: 'definition', needs: 'viewer', doc: () => '{ definition(slug: "auth-fixture") { id } }' },
  { field: 'health', needs: 'viewer', doc: () => '{ health { ok } }' },
  { field: 'runPage', needs: 'viewer', doc: () => '{ runPage(first: 1) { nodes { id } } }' },
  {
    field: 'startRun',
    needs: 'operator',
    doc: () => `mutation { startRun(definitionId: "${MISSING}") { id } }`,
  },
  { field: 'pauseRun', needs: 'operator', doc: () => `mutation { pauseRun(id: "${MISSING}") { applied } }` },
  {
    field: 'resumeRun',
    needs: 'operator',
    doc: () => `mutation { resumeRun(id: "${MISSING}") { applied } }`,
  },
  {
    field: 'cancelRun',
    needs: 'operator',
    doc: () => `mutation { cancelRun(id: "${MISSING}") { applied } }`,
  },
  {
    field: 'resolveCue',
    needs: 'operator',
    doc: () => `mutation { resolveCue(stepId: "${MISSING}") { applied } }`,
  },
  {
    field: 'skipStep',
    needs: 'operator',
    doc: () => `mutation { skipStep(stepId: "${MISSING}") { applied } }`,
  },
  {
    field: 'createDefinition',
    needs: 'admin',
    doc: () =>
      `mutation { createDefinition(input: { slug: "auth-${++slugSeq}", title: "T", program: { phases: [{ name: "p", steps: [{ kind: "core.log", params: { message: "m" } }] }] } }) { id } }`,
  },
  {
    field: 'updateDefinition',
    needs: 'admin',
    doc: () => `mutation { updateDefinition(id: "${MISSING}", input: { title: "x" }) { id } }`,
  },
  {
    field: 'publishVersion',
    needs: 'admin',
    doc: () => `mutation { publishVersion(definitionId: "${MISSING}", program: {}) { id } }`,
  },
  {
    field: 'setDefinitionState',
    needs: 'admin',
    doc: () => `mutation { setDefinitionState(id: "${MISSING}", state: PAUSED) { id } }`,
  },
  { field: 'apiKeys', needs: 'admin', doc: () => '{ apiKeys { id } }' },
  {
    field: 'createApiKey',
    needs: 'admin',
    doc: () => `mutation { createApiKey(name: "matrix-${++slugSeq}", role: VIEWER) { key { id } } }`,
  },
  { field: 'revokeApiKey', needs: 'admin', doc: () => `mutation { revokeApiKey(id: "${MISSING}") { id } }` },
  {
    field: 'runStatus',
    needs: 'viewer',
    subscription: true,
    doc: () => `subscription { runStatus(id: "${MISSING}") { id status } }`,
  },
  {
    // A bad filter ends the stream once the role check has passed.
    field: 'runChanges',
    needs: 'viewer',
    subscription: true,
    doc: () => 'subscription { runChanges(filter: { definitionId: "not-an-id" }) { id } }',
  },
]

const CALLERS: { name: string; auth: Auth }[] = [
  { name: 'no token', auth: null },
  { name: 'wrong token', auth: { raw: 'not-a-configured-token-0000' } },
  { name: 'viewer', auth: 'viewer' },
  { name: 'operator', auth: 'operator' },
  { name: 'admin', auth: 'admin' },
]

interface Outcome {
  status: number
  codes: string[]
  hasData: boolean
}

async function call(c: FieldCase, auth: Auth): Promise<Outcome> {
  if (c.subscription) {
    const sub = sseSubscribe(s, c.doc(), undefined, auth)
    const status = await sub.status
    await sub.done
    const codes = sub.events.flatMap((e) => (e.errors ?? []).map((x) => String(x.extensions?.code)))
    return { status, codes, hasData: sub.events.some((e) => e.data != null) }
  }
  const r = await s.gql(c.doc(), { auth })
  return {
    status: r.status,
    codes: (r.body.errors ?? []).map((e) => String(e.extensions?.code)),
    hasData: r.body.data != null,
  }
}

describe('auth matrix over HTTP', () => {
  it.each(FIELDS.map((f) => [f.field, f] as const))(
    '%s: each caller gets what its role allows',
    async (_name, c) => {
      const seen: Record<string, string> = {}
      for (const caller of CALLERS) {
        const o = await call(c, caller.auth)
        let verdict: string
        if (o.codes.includes('UNAUTHENTICATED')) verdict = `unauthenticated:${o.status}`
        else if (o.codes.includes('FORBIDDEN')) verdict = 'forbidden'
        else verdict = 'allowed'
        seen[caller.name] = verdict
      }
      const expected: Record<string, string> = {
        'no token': 'unauthenticated:401',
        'wrong token': 'unauthenticated:401',
      }
      for (const role of ROLE_ORDER) {
        expected[role] = ROLE_ORDER.indexOf(role) >= ROLE_ORDER.indexOf(c.needs) ? 'allowed' : 'forbidden'
      }
      expect(seen).toEqual(expected)
    },
  )

  it('an unauthenticated request learns nothing about the schema, not even from validation', async () => {
    const r = await s.gql('{ nosuchField }', { auth: null })
    expect(r.status).toBe(401)
    expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/)
    expect(r.body.errors).toHaveLength(1)
    expect(r.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    expect(JSON.stringify(r.body)).not.toContain('nosuchField')
    const intro = await s.gql('{ __schema { types { name } } }', { auth: null })
    expect(intro.status).toBe(401)
    expect(intro.body.data).toBeUndefined()
  })

  it('introspection is allowed for any authenticated caller', async () => {
    const r = await s.gql('{ __schema { queryType { name } } }', { auth: 'viewer' })
    expect(r.body).toEqual({ data: { __schema: { queryType: { name: 'Query' } } } })
  })

  it('judges a mixed document field by field: the operator field runs, the admin field is FORBIDDEN', async () => {
    const before = await s.gql<{ runs: { id: string }[] }>(`{ runs(definitionId: "${definitionId}") { id } }`)
    const r = await s.gql(
      `mutation { startRun(definitionId: "${definitionId}", scope: "mixed") { id } createDefinition(input: { slug: "mixed-doc", title: "M", program: {} }) { id } }`,
      { auth: 'operator' },
    )
    expect(r.body.errors?.map((e) => [e.path?.[0], e.extensions?.code])).toEqual([
      ['createDefinition', 'FORBIDDEN'],
    ])
    const after = await s.gql<{ runs: { id: string; scope: string }[] }>(
      `{ runs(definitionId: "${definitionId}") { id scope } }`,
    )
    expect(after.body.data?.runs.length).toBe((before.body.data?.runs.length ?? 0) + 1)
    expect(after.body.data?.runs.some((x) => x.scope === 'mixed')).toBe(true)
    const none = await s.gql('{ definition(slug: "mixed-doc") { id } }')
    expect(none.body.data).toEqual({ definition: null })
  })

  it('records the actor (role#hash, never the token) on run controls and definition changes', async () => {
    const operator = tokenActor('operator', TOKENS.operator)
    const admin = tokenActor('admin', TOKENS.admin)
    const started = await s.gql<{ startRun: { id: string; startedBy: string } }>(
      `mutation { startRun(definitionId: "${definitionId}", scope: "actor") { id startedBy } }`,
      { auth: 'operator' },
    )
    expect(started.body.data?.startRun.startedBy).toBe(operator)
    const id = Number(started.body.data?.startRun.id)
    await s.gql(`mutation { cancelRun(id: "${id}", reason: "testing") { applied } }`, { auth: 'operator' })
    const lines = await logs.listForRun(s.t.db, id)
    expect(lines.filter((l) => l.actor === operator).map((l) => l.message)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^cancel by operator#/),
        expect.stringMatching(/requested by operator#/),
      ]),
    )
    await s.gql(
      `mutation { updateDefinition(id: "${definitionId}", input: { title: "Auth fixture 2" }) { id } }`,
    )
    const entries = await audit.list(s.t.db, { targetType: 'definition', targetId: definitionId })
    expect(
      entries.some((e) => e.actor === admin && e.action === 'updateDefinition' && e.outcome === 'ok'),
    ).toBe(true)
    const everything = JSON.stringify([lines, entries])
    for (const token of Object.values(TOKENS)) expect(everything).not.toContain(token)
  })

  it('audits refused definition changes too, with the actor, the code and the reason', async () => {
    const admin = tokenActor('admin', TOKENS.admin)
    const bad = await s.gql(
      `mutation { createDefinition(input: { slug: "refused-doc", title: "x",
         program: { phases: [{ name: "p", steps: [{ kind: "core.nope" }] }] } }) { id } }`,
    )
    expect(bad.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    const unknown = await s.gql('mutation { publishVersion(definitionId: "987654", program: {}) { id } }')
    expect(unknown.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
    const refusedCreate = (await audit.list(s.t.db, { targetType: 'definition', targetId: 'refused-doc' }))[0]
    expect(refusedCreate).toMatchObject({ actor: admin, action: 'createDefinition', outcome: 'refused' })
    expect(refusedCreate?.detail).toMatchObject({
      code: 'BAD_USER_INPUT',
      reason: expect.stringMatching(/core\.nope/),
    })
    const refusedPublish = (await audit.list(s.t.db, { targetType: 'definition', targetId: '987654' }))[0]
    expect(refusedPublish).toMatchObject({ actor: admin, action: 'publishVersion', outcome: 'refused' })
    expect(refusedPublish?.detail).toMatchObject({ code: 'NOT_FOUND' })
  })
})

describe('auth over WebSocket', () => {
  async function closedWith(auth: Auth): Promise<{ code: number; reason: string }> {
    let closed: { code: number; reason: string } | undefined
    const client = wsClient(s, auth, (e) => {
      closed ??= e
    })
    const sub = wsSubscribe(client, '{ health { ok } }')
    const outcome = await sub.done.then(
      () => 'completed',
      () => 'refused',
    )
    await client.dispose()
    expect(outcome).toBe('refused')
    expect(sub.events).toEqual([])
    return closed ?? { code: 0, reason: '' }
  }

  it('refuses a connection without a token (4401) before anything runs', async () => {
    const e = await closedWith(null)
    expect(e.code).toBe(4401)
    expect(e.reason).toMatch(/Unauthorized/)
  })

  it('refuses a wrong token (4401)', async () => {
    const e = await closedWith({ raw: 'wrong-token-000000000000' })
    expect(e.code).toBe(4401)
  })

  it('reads the token from connectionParams.authorization, Authorization, a bare token or the upgrade header', async () => {
    const attempts: { params: Record<string, unknown>; headers?: Record<string, string> }[] = [
      { params: { authorization: `Bearer ${TOKENS.viewer}` } },
      { params: { Authorization: `Bearer ${TOKENS.viewer}` } },
      { params: { authorization: TOKENS.viewer } },
      { params: {}, headers: { authorization: `Bearer ${TOKENS.viewer}` } },
    ]
    for (const attempt of attempts) {
      const client = createClient({
        url: s.wsUrl,
        webSocketImpl: class extends WebSocket {
          constructor(address: string, protocols?: string | string[]) {
            super(address, protocols, { headers: attempt.headers })
          }
        },
        connectionParams: attempt.params,
        retryAttempts: 0,
        lazy: true,
      })
      try {
        const q = wsSubscribe<{ health: { database: boolean } }>(client, '{ health { database } }')
        await q.done
        expect(q.events, JSON.stringify(attempt)).toEqual([{ data: { health: { database: true } } }])
      } finally {
        await client.dispose()
      }
    }
    // A bare wrong token is still refused.
    const e = await closedWith({ raw: 'wrong-token-000000000000' })
    expect(e.code).toBe(4401)
  })

  it('lets a viewer subscribe and query, and judges mutations by role', async () => {
    const viewer = wsClient(s, 'viewer')
    const operator = wsClient(s, 'operator')
    try {
      const q = wsSubscribe<{ health: { database: boolean } }>(viewer, '{ health { database } }')
      await q.done
      expect(q.events).toEqual([{ data: { health: { database: true } } }])

      const sub = wsSubscribe<{ runStatus: { id: string; status: string } }>(
        viewer,
        'subscription ($id: ID!) { runStatus(id: $id) { id status } }',
        { id: runId },
      )
      const first = await sub.until((e) => e.data?.runStatus != null)
      expect(first.data?.runStatus.id).toBe(runId)
      sub.stop()

      const denied = wsSubscribe(viewer, `mutation { pauseRun(id: "${runId}") { applied } }`)
      await denied.done
      expect(denied.events[0]?.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')

      const allowed = wsSubscribe<{ pauseRun: { applied: boolean } }>(
        operator,
        `mutation { pauseRun(id: "${runId}") { applied } }`,
      )
      await allowed.done
      expect(allowed.events[0]?.errors).toBeUndefined()
      expect(typeof allowed.events[0]?.data?.pauseRun.applied).toBe('boolean')
    } finally {
      await viewer.dispose()
      await operator.dispose()
    }
  })

  it('answers NOT_FOUND for a subscription to an unknown run', async () => {
    const viewer = wsClient(s, 'viewer')
    try {
      const sub = wsSubscribe(viewer, `subscription { runStatus(id: "${MISSING}") { id } }`)
      await sub.done
      expect(sub.events[0]?.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
      expect(sub.events[0]?.errors?.[0]?.message).toBe(`No run with id "${MISSING}" exists.`)
    } finally {
      await viewer.dispose()
    }
    await eventually(() => s.app.poller.listenerCount === 0)
  })
})
