/**
 * API keys through the real server: made by an admin, the secret answered
 * once and stored nowhere, the holder's name on everything they do, and a
 * revoked or expired key refused on every instance (HTTP, WebSocket, SSE,
 * open subscriptions included) within STATUS_POLL_MS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as audit from '../sql/auditLog.ts'
import * as logs from '../sql/eventRunLogs.ts'
import { createLogger } from '../src/log.ts'
import { createDefinition } from './helpers/consoleScene.ts'
import { captureLog } from './helpers/logCapture.ts'
import {
  eventually,
  SESSION_PROGRAM,
  SHOWRUNNER_TOKENS,
  sseSubscribe,
  startSecondInstance,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

/** Slower than the other suites' 50 ms so "within STATUS_POLL_MS" is measurable on a busy machine. */
const POLL_MS = 300
/** A bootstrap token written role:name=token. */
const NAMED = 'stage-manager-token-0123456789'
/** A bootstrap token that happens to look like an API key. */
const KEY_LIKE = 'sr_live_bootstrap-token-0123456789'

let a: TestServer
let b: TestServer
/** Both instances log here, at debug, so the tests can read every line either wrote. */
const log = captureLog()

beforeAll(async () => {
  a = await startTestServer({
    deps: { logger: createLogger({ level: 'debug', destination: log.stream }) },
    env: {
      STATUS_POLL_MS: String(POLL_MS),
      SHOWRUNNER_TOKENS: `${SHOWRUNNER_TOKENS},operator:Stage Manager=${NAMED},viewer:Looks Like A Key=${KEY_LIKE}`,
    },
  })
  // A second instance on the same database: its own process state (cache, poller), the same rows.
  b = await startSecondInstance(a, {
    env: { STATUS_POLL_MS: String(POLL_MS), INSTANCE_ID: `keys-b-${process.pid}` },
    deps: { logger: createLogger({ level: 'debug', destination: log.stream }) },
  })
})
afterAll(async () => {
  await b?.close()
  await a?.close()
})

interface Created {
  key: {
    id: string
    name: string
    role: string
    teams: string[]
    prefix: string
    createdBy: string
    expiresAt: string | null
  }
  secret: string
}

async function createKey(vars: {
  name: string
  role: string
  teams?: string[]
  expiresAt?: string
}): Promise<Created> {
  const r = await a.gql<{ createApiKey: Created }>(
    `mutation ($name: String!, $role: Role!, $teams: [String!], $expiresAt: DateTime) {
       createApiKey(name: $name, role: $role, teams: $teams, expiresAt: $expiresAt) {
         key { id name role teams prefix createdBy expiresAt } secret } }`,
    { variables: vars },
  )
  expect(r.body.errors).toBeUndefined()
  return r.body.data?.createApiKey as Created
}

const VIEWER_Q = '{ viewer { name role teams actor } }'

describe('creating and using a key', () => {
  it("answers the secret once, with a recognisable prefix, and the key under the admin's name", async () => {
    const c = await createKey({ name: 'Ada Lovelace', role: 'OPERATOR', teams: ['stage', 'sound'] })
    expect(c.secret).toMatch(/^sr_live_[A-Za-z0-9_-]{43}$/)
    expect(c.key).toMatchObject({
      name: 'Ada Lovelace',
      role: 'OPERATOR',
      teams: ['stage', 'sound'],
      expiresAt: null,
    })
    expect(c.key.prefix).toBe(c.secret.slice(0, 12))
    expect(c.key.createdBy).toMatch(/^admin#[0-9a-f]{8}$/)
    const listed = await a.gql<{ apiKeys: Record<string, unknown>[] }>(
      '{ apiKeys { id name prefix lastUsedAt revokedAt } }',
    )
    expect(listed.body.data?.apiKeys.find((k) => k.id === c.key.id)).toMatchObject({ name: 'Ada Lovelace' })
    expect(JSON.stringify(listed.body)).not.toContain(c.secret)
  })

  it('names the holder in Viewer, startedBy, run logs and audit rows', async () => {
    const admin = await createKey({ name: 'Grace Hopper', role: 'ADMIN' })
    const op = await createKey({ name: 'Ada Lovelace', role: 'OPERATOR', teams: ['stage'] })
    const asAdmin = { auth: { raw: admin.secret } }
    const asOp = { auth: { raw: op.secret } }
    const me = await a.gql<{ viewer: unknown }>(VIEWER_Q, asOp)
    expect(me.body.data?.viewer).toEqual({
      name: 'Ada Lovelace',
      role: 'OPERATOR',
      teams: ['stage'],
      actor: 'Ada Lovelace',
    })

    const def = await a.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "named", title: "Named", program: $p }) { id } }',
      { variables: { p: SESSION_PROGRAM }, ...asAdmin },
    )
    const definitionId = def.body.data?.createDefinition.id as string
    const started = await a.gql<{ startRun: { id: string; startedBy: string } }>(
      `mutation { startRun(definitionId: "${definitionId}", scope: "named") { id startedBy } }`,
      asOp,
    )
    expect(started.body.data?.startRun.startedBy).toBe('Ada Lovelace')
    const runId = Number(started.body.data?.startRun.id)
    await a.gql(`mutation { cancelRun(id: "${runId}", reason: "rehearsal over") { applied } }`, asOp)
    const lines = await logs.listForRun(a.t.db, runId)
    expect(lines.filter((l) => l.actor === 'Ada Lovelace').map((l) => l.message)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/requested by Ada Lovelace/),
        expect.stringMatching(/^cancel by Ada Lovelace/),
      ]),
    )
    const entries = await audit.list(a.t.db, { targetType: 'definition', targetId: definitionId })
    expect(entries.some((e) => e.actor === 'Grace Hopper' && e.action === 'createDefinition')).toBe(true)
    const keyAudit = await audit.list(a.t.db, { targetType: 'apiKey', targetId: op.key.id })
    expect(keyAudit[0]).toMatchObject({
      action: 'createApiKey',
      outcome: 'ok',
      actor: expect.stringMatching(/^admin#/),
    })
    // A refused attempt is audited under the person's name too.
    const refused = await a.gql('mutation { createApiKey(name: "sneaky", role: ADMIN) { secret } }', asOp)
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    // The refusal is audited without holding up the answer: wait for the row.
    await eventually(async () =>
      (await audit.list(a.t.db, { targetType: 'api' })).some(
        (e) => e.actor === 'Ada Lovelace' && e.action === 'Mutation.createApiKey',
      ),
    )
  })

  it('records lastUsedAt without a write per request', async () => {
    const c = await createKey({ name: 'busy service', role: 'VIEWER' })
    for (let i = 0; i < 20; i++) expect((await b.gql(VIEWER_Q, { auth: { raw: c.secret } })).status).toBe(200)
    const used = await eventually(async () => {
      const r = await a.gql<{ apiKeys: { id: string; lastUsedAt: string | null }[] }>(
        '{ apiKeys { id lastUsedAt } }',
      )
      return r.body.data?.apiKeys.find((k) => k.id === c.key.id)?.lastUsedAt
    }, 5000)
    expect(Date.parse(used)).toBeGreaterThan(Date.now() - 60_000)
    // Twenty requests, one write: more uses within the minute change nothing.
    for (let i = 0; i < 5; i++) await b.gql(VIEWER_Q, { auth: { raw: c.secret } })
    await new Promise((r) => setTimeout(r, POLL_MS * 3))
    const again = await a.gql<{ apiKeys: { id: string; lastUsedAt: string | null }[] }>(
      '{ apiKeys { id lastUsedAt } }',
    )
    expect(again.body.data?.apiKeys.find((k) => k.id === c.key.id)?.lastUsedAt).toBe(used)
  })

  it('refuses bad input and non-admins', async () => {
    const past = await a.gql(
      'mutation { createApiKey(name: "x", role: VIEWER, expiresAt: "2020-01-01T00:00:00Z") { secret } }',
    )
    expect(past.body.errors?.[0]).toMatchObject({
      extensions: { code: 'BAD_USER_INPUT' },
      message: expect.stringMatching(/expiresAt is in the past/),
    })
    const blank = await a.gql('mutation { createApiKey(name: "   ", role: VIEWER) { secret } }')
    expect(blank.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    // A lone surrogate is legal in GraphQL but not in UTF-8: stored as U+FFFD, never "Unexpected error".
    const odd = await a.gql<{ createApiKey: { key: { name: string; teams: string[] } } }>(
      'mutation ($n: String!, $t: [String!]) { createApiKey(name: $n, role: VIEWER, teams: $t) { key { name teams } } }',
      { variables: { n: 'odd \udfff', t: ['t\udfff'] } },
    )
    expect(odd.body.errors).toBeUndefined()
    expect(odd.body.data?.createApiKey.key.teams).toEqual(['t\ufffd'])
    const team = await a.gql('mutation { createApiKey(name: "t", role: VIEWER, teams: [""]) { secret } }')
    expect(team.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    const unknown = await a.gql('mutation { revokeApiKey(id: "987654") { id } }')
    expect(unknown.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
    const badId = await a.gql('mutation { revokeApiKey(id: "nope") { id } }')
    expect(badId.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    const viewer = await a.gql('{ apiKeys { id } }', { auth: 'viewer' })
    expect(viewer.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const forged = await a.gql(VIEWER_Q, { auth: { raw: `sr_live_${'A'.repeat(43)}` } })
    expect(forged.status).toBe(401)
    expect(forged.body.errors?.[0]?.message).toMatch(/^Invalid token/)
  })
})

describe('named bootstrap tokens', () => {
  it('role:name=token is recorded under the name; role:token keeps role#hash', async () => {
    const me = await a.gql<{ viewer: unknown }>(VIEWER_Q, { auth: { raw: NAMED } })
    expect(me.body.data?.viewer).toEqual({
      name: 'Stage Manager',
      role: 'OPERATOR',
      teams: [],
      actor: 'Stage Manager',
    })
    const old = await a.gql<{ viewer: { name: string } }>(VIEWER_Q, { auth: 'operator' })
    expect(old.body.data?.viewer.name).toMatch(/^operator#[0-9a-f]{8}$/)
    const definitionId = await createDefinition(a, {
      slug: 'named-token',
      title: 'Named token',
      program: SESSION_PROGRAM,
    })
    const started = await a.gql<{ startRun: { startedBy: string } }>(
      `mutation { startRun(definitionId: "${definitionId}") { startedBy } }`,
      { auth: { raw: NAMED } },
    )
    expect(started.body.data?.startRun.startedBy).toBe('Stage Manager')
  })

  it('are matched first, in constant time, without a database lookup, even when they look like a key', async () => {
    // A fresh instance: its keyring holds no key, so it polls nothing (on the
    // first instance the poll of the keys used above could land inside the
    // request and be counted), and every statement on its pool is the request's.
    const c = await startSecondInstance(a, {
      env: {
        SHOWRUNNER_TOKENS: `${SHOWRUNNER_TOKENS},viewer:Looks Like A Key=${KEY_LIKE}`,
        INSTANCE_ID: `keys-c-${process.pid}`,
      },
    })
    try {
      const before = c.app.db.stats.statements
      const me = await c.gql<{ viewer: { name: string } }>(VIEWER_Q, { auth: { raw: KEY_LIKE } })
      expect(me.body.data?.viewer.name).toBe('Looks Like A Key')
      expect(c.app.db.stats.statements).toBe(before)
      // A key-shaped token that is no bootstrap token is looked up (and refused):
      // the count above is one that moves when a lookup happens.
      const unknown = await c.gql(VIEWER_Q, { auth: { raw: `sr_live_${'B'.repeat(43)}` } })
      expect(unknown.status).toBe(401)
      expect(c.app.db.stats.statements).toBeGreaterThan(before)
    } finally {
      await c.close()
    }
  })
})

describe('revocation on every instance', () => {
  it('a key revoked on A is refused on B within STATUS_POLL_MS, on HTTP, and its open WebSocket and SSE end', async () => {
    const c = await createKey({ name: 'night shift', role: 'VIEWER' })
    const auth = { raw: c.secret }
    // B has the key cached (and is holding it open on two transports).
    expect((await b.gql<{ viewer: { name: string } }>(VIEWER_Q, { auth })).body.data?.viewer.name).toBe(
      'night shift',
    )
    let closed: { code: number; reason: string } | undefined
    const ws = wsClient(b, auth, (e) => {
      closed ??= e
    })
    const wsSub = wsSubscribe(ws, 'subscription { waitingSteps { id } }')
    await wsSub.until((e) => e.data != null)
    const sse = sseSubscribe(b, 'subscription { waitingSteps { id } }', undefined, auth)
    await sse.until((e) => e.data != null)

    const revoked = await a.gql<{ revokeApiKey: { revokedAt: string | null } }>(
      `mutation { revokeApiKey(id: "${c.key.id}") { revokedAt } }`,
    )
    const t0 = Date.now()
    expect(revoked.body.data?.revokeApiKey.revokedAt).not.toBeNull()
    // A refuses at once: it revoked the key itself.
    const onA = await a.gql(VIEWER_Q, { auth })
    expect(onA.status).toBe(401)
    expect(onA.body.errors?.[0]?.message).toMatch(/revoked/)
    // B refuses within one poll interval (plus the poll's own round trip).
    await eventually(async () => (await b.gql(VIEWER_Q, { auth })).status === 401, POLL_MS * 4, 10)
    const refusedAfter = Date.now() - t0
    expect(refusedAfter).toBeLessThan(POLL_MS + 250)
    await eventually(() => closed, 2000)
    expect(closed).toMatchObject({ code: 4401, reason: expect.stringMatching(/revoked/) })
    await sse.done
    expect(sse.events.at(-1)?.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    await ws.dispose()
    // A new socket and a new stream are refused outright.
    let again: { code: number; reason: string } | undefined
    const ws2 = wsClient(b, auth, (e) => {
      again ??= e
    })
    await wsSubscribe(ws2, '{ viewer { name } }').done.catch(() => {})
    await ws2.dispose()
    expect(again?.code).toBe(4401)
    const sse2 = sseSubscribe(b, 'subscription { waitingSteps { id } }', undefined, auth)
    expect(await sse2.status).toBe(401)
    // Revoking again is harmless and keeps the first time.
    const twice = await a.gql<{ revokeApiKey: { revokedAt: string } }>(
      `mutation { revokeApiKey(id: "${c.key.id}") { revokedAt } }`,
    )
    expect(twice.body.data?.revokeApiKey.revokedAt).toBe(revoked.body.data?.revokeApiKey.revokedAt)
    const listed = await a.gql<{ apiKeys: { id: string }[] }>('{ apiKeys { id } }')
    expect(listed.body.data?.apiKeys.some((k) => k.id === c.key.id)).toBe(false)
    const all = await a.gql<{ apiKeys: { id: string }[] }>('{ apiKeys(includeRevoked: true) { id } }')
    expect(all.body.data?.apiKeys.some((k) => k.id === c.key.id)).toBe(true)
  })

  it('an expired key is refused everywhere, and its open subscriptions end at expiry', async () => {
    const expiresAt = new Date(Date.now() + 1500).toISOString()
    const c = await createKey({ name: 'temp', role: 'VIEWER', expiresAt })
    const auth = { raw: c.secret }
    expect((await b.gql(VIEWER_Q, { auth })).status).toBe(200)
    let closed: { code: number; reason: string } | undefined
    const ws = wsClient(b, auth, (e) => {
      closed ??= e
    })
    const sub = wsSubscribe(ws, 'subscription { waitingSteps { id } }')
    await sub.until((e) => e.data != null)
    await eventually(() => closed, 4000)
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(expiresAt))
    expect(closed).toMatchObject({ code: 4401, reason: expect.stringMatching(/expired/) })
    await ws.dispose()
    for (const s of [a, b]) {
      const r = await s.gql(VIEWER_Q, { auth })
      expect(r.status).toBe(401)
      expect(r.body.errors?.[0]?.message).toMatch(/expired/)
    }
  })
})

describe('the secret is stored nowhere', () => {
  it('appears in no text column of any table', async () => {
    const c = await createKey({ name: 'audited', role: 'ADMIN', teams: ['ops'] })
    // Use it for a few things that write logs and audit rows.
    const id = await createDefinition(
      { ...a, gql: (q, o) => a.gql(q, { ...o, auth: { raw: c.secret } }) },
      { slug: 'secret-check', title: 'Secret check', program: SESSION_PROGRAM },
    )
    await a.gql(`mutation { startRun(definitionId: "${id}") { id } }`, { auth: { raw: c.secret } })
    await a.gql(`mutation { revokeApiKey(id: "${c.key.id}") { id } }`, { auth: { raw: c.secret } })
    const columns = await a.t.db.query<{ TABLE_NAME: string; COLUMN_NAME: string }>(
      `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE()
          AND DATA_TYPE IN ('char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext', 'json', 'binary', 'varbinary', 'blob', 'longblob', 'mediumblob')`,
    )
    expect(columns.some((col) => col.TABLE_NAME === 'api_keys' && col.COLUMN_NAME === 'digest')).toBe(true)
    const random = c.secret.slice('sr_live_'.length)
    let cells = 0
    for (const col of columns) {
      const rows = await a.t.db.query<{ v: string | Buffer | null }>(
        `SELECT \`${col.COLUMN_NAME}\` AS v FROM \`${col.TABLE_NAME}\``,
      )
      for (const r of rows) {
        if (r.v === null) continue
        cells++
        const text = Buffer.isBuffer(r.v) ? r.v.toString('latin1') : String(r.v)
        expect(text, `${col.TABLE_NAME}.${col.COLUMN_NAME}`).not.toContain(random)
        expect(text).not.toContain(c.secret.slice(0, 20))
      }
    }
    expect(cells).toBeGreaterThan(20)
    // Nor in any log line either instance wrote.
    const logged = JSON.stringify(log.lines)
    expect(log.lines.length).toBeGreaterThan(10)
    expect(logged).not.toContain(random)
  })

  it('a refused key is logged as revoked or expired, anonymously, without the secret', async () => {
    const refused = log.lines.filter((l) => l.msg === 'refused authentication')
    expect(refused.some((l) => l.credential === 'revoked' && l.actor === 'anonymous')).toBe(true)
    expect(refused.some((l) => l.credential === 'expired')).toBe(true)
    expect(JSON.stringify(refused)).not.toMatch(/sr_live_[A-Za-z0-9_-]{20}/)
    const closed = log.lines.filter((l) => String(l.msg).startsWith('closed a WebSocket'))
    expect(closed.map((l) => l.actor)).toEqual(expect.arrayContaining(['night shift', 'temp']))
  })
})
