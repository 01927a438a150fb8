/**
 * OIDC bearer tokens through the real server, signed by oauth2-mock-server on
 * loopback: accepted with the name and teams from their claims and the
 * strongest mapped role; every kind of bad token refused on HTTP, WebSocket
 * (connectionParams) and SSE; keys discovered, cached and fetched again for an
 * unknown key id; an open subscription ends when its token expires.
 */
import { createHmac, createPublicKey } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { OAuth2Server } from 'oauth2-mock-server'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as logs from '../sql/eventRunLogs.ts'
import { loadConfig } from '../src/config.ts'
import { OidcVerifier } from '../src/identity/oidc.ts'
import { createDefinition } from './helpers/consoleScene.ts'
import {
  SESSION_PROGRAM,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

const AUDIENCE = 'showrunner-api'
const ROLE_MAP = 'crew=viewer,stage=operator,producers=admin'
let idp: OAuth2Server
let s: TestServer
let signingKid: string

type Claims = Record<string, unknown>

/** A token from the mock issuer with these claims on top of sensible ones (its own iss, exp in an hour). */
function token(claims: Claims = {}, opts: { expiresIn?: number; kid?: string } = {}): Promise<string> {
  return idp.issuer.buildToken({
    kid: opts.kid,
    expiresIn: opts.expiresIn,
    scopesOrTransform: (_header, payload) => {
      Object.assign(
        payload,
        { aud: AUDIENCE, sub: 'u-1', email: 'ada@example.com', groups: ['stage'] },
        claims,
      )
      for (const [k, v] of Object.entries(claims)) if (v === undefined) delete payload[k]
    },
  })
}

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url')
function unsigned(payload: Claims): string {
  return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(payload)}.`
}

beforeAll(async () => {
  idp = new OAuth2Server()
  signingKid = (await idp.issuer.keys.generate('RS256')).kid as string
  await idp.start(0, '127.0.0.1')
  s = await startTestServer({
    env: { OIDC_ISSUER: idp.issuer.url as string, OIDC_AUDIENCE: AUDIENCE, OIDC_ROLE_MAP: ROLE_MAP },
    deps: { jwksCooldownMs: 0 },
  })
})
afterAll(async () => {
  await s?.close()
  await idp?.stop()
})

const VIEWER_Q = '{ viewer { name role teams } }'

describe('accepted tokens', () => {
  it('names the person from email and teams from groups; the strongest mapped role wins', async () => {
    const jwt = await token({ groups: ['crew', 'stage', 'unrelated'] })
    const r = await s.gql(VIEWER_Q, { auth: { raw: jwt } })
    expect(r.body).toEqual({
      data: { viewer: { name: 'ada@example.com', role: 'OPERATOR', teams: ['crew', 'stage', 'unrelated'] } },
    })
    const producer = await s.gql<{ viewer: { role: string } }>(VIEWER_Q, {
      auth: { raw: await token({ groups: ['producers', 'crew'] }) },
    })
    expect(producer.body.data?.viewer.role).toBe('ADMIN')
  })

  it('records the SSO user by name on what they do', async () => {
    const definitionId = await createDefinition(s, { slug: 'sso', title: 'SSO', program: SESSION_PROGRAM })
    const jwt = await token({ email: 'grace@example.com', groups: ['stage'] })
    const started = await s.gql<{ startRun: { id: string; startedBy: string } }>(
      `mutation { startRun(definitionId: "${definitionId}") { id startedBy } }`,
      { auth: { raw: jwt } },
    )
    expect(started.body.data?.startRun.startedBy).toBe('grace@example.com')
    const lines = await logs.listForRun(s.t.db, Number(started.body.data?.startRun.id))
    expect(lines.some((l) => l.actor === 'grace@example.com')).toBe(true)
  })

  it('tolerates 30 s of clock skew, and no more', async () => {
    const now = Math.floor(Date.now() / 1000)
    expect((await s.gql(VIEWER_Q, { auth: { raw: await token({ exp: now - 10 }) } })).status).toBe(200)
    expect((await s.gql(VIEWER_Q, { auth: { raw: await token({ nbf: now + 10 }) } })).status).toBe(200)
    expect((await s.gql(VIEWER_Q, { auth: { raw: await token({ exp: now - 45 }) } })).status).toBe(401)
  })

  it('fetches the keys again for an unknown key id (rotation)', async () => {
    expect((await s.gql(VIEWER_Q, { auth: { raw: await token() } })).status).toBe(200)
    const rotated = (await idp.issuer.keys.generate('ES256')).kid as string
    const r = await s.gql(VIEWER_Q, { auth: { raw: await token({}, { kid: rotated }) } })
    expect(r.status).toBe(200)
  })
})

/** Each kind of bad token, and the words the refusal uses. */
async function badTokens(): Promise<{ name: string; jwt: string; detail: RegExp }[]> {
  const now = Math.floor(Date.now() / 1000)
  const good = await token()
  const p = good.split('.')[1] as string
  // HS256 "signed" with the issuer's public key, the classic algorithm confusion.
  // The public key exactly as the issuer publishes it.
  const jwk = (idp.issuer.keys.toJSON() as { kid?: string }[]).find((k) => k.kid === signingKid)
  const pem = createPublicKey({ key: jwk as never, format: 'jwk' }).export({ type: 'spki', format: 'pem' })
  const hsHeader = b64({ alg: 'HS256', typ: 'JWT', kid: signingKid })
  const hsSig = createHmac('sha256', pem).update(`${hsHeader}.${p}`).digest('base64url')
  const other = new OAuth2Server()
  await other.issuer.keys.generate('RS256')
  other.issuer.url = idp.issuer.url as string
  const foreign = await other.issuer.buildToken({
    scopesOrTransform: (_h, pl) =>
      Object.assign(pl, { aud: AUDIENCE, email: 'mallory@example.com', groups: ['producers'] }),
  })
  return [
    {
      name: 'expired',
      jwt: await token({ exp: now - 120, nbf: now - 600, iat: now - 600 }),
      detail: /expired/,
    },
    { name: 'not yet valid', jwt: await token({ nbf: now + 600 }), detail: /not yet valid/ },
    { name: 'wrong issuer', jwt: await token({ iss: 'https://evil.example.com' }), detail: /wrong issuer/ },
    { name: 'wrong audience', jwt: await token({ aud: 'another-app' }), detail: /wrong audience/ },
    { name: 'unknown key', jwt: foreign, detail: /key the issuer does not publish/ },
    {
      name: 'alg none',
      jwt: unsigned({
        iss: idp.issuer.url,
        aud: AUDIENCE,
        exp: now + 600,
        email: 'eve@example.com',
        groups: ['producers'],
      }),
      detail: /algorithm not allowed|malformed/,
    },
    { name: 'HS256 with the public key', jwt: `${hsHeader}.${p}.${hsSig}`, detail: /algorithm not allowed/ },
    {
      name: 'no mapped team',
      jwt: await token({ groups: ['visitors'] }),
      detail: /no team of this user is in OIDC_ROLE_MAP/,
    },
    { name: 'no expiry', jwt: await token({ exp: undefined }), detail: /exp/ },
    { name: 'bad signature', jwt: `${good.slice(0, -6)}AAAAAA`, detail: /bad signature/ },
  ]
}

describe('refused tokens, on every transport', () => {
  it('HTTP: 401 UNAUTHENTICATED saying what was wrong', async () => {
    for (const bad of await badTokens()) {
      const r = await s.gql(VIEWER_Q, { auth: { raw: bad.jwt } })
      expect(r.status, bad.name).toBe(401)
      expect(r.body.errors?.[0]?.extensions?.code, bad.name).toBe('UNAUTHENTICATED')
      expect(r.body.errors?.[0]?.message, bad.name).toMatch(bad.detail)
      expect(r.body.data, bad.name).toBeUndefined()
    }
  })

  it('WebSocket connectionParams: closed with 4401 before anything runs', async () => {
    for (const bad of await badTokens()) {
      let closed: { code: number; reason: string } | undefined
      const client = wsClient(s, { raw: bad.jwt }, (e) => {
        closed ??= e
      })
      const sub = wsSubscribe(client, VIEWER_Q)
      await sub.done.catch(() => {})
      await client.dispose()
      expect(closed?.code, bad.name).toBe(4401)
      expect(closed?.reason, bad.name).toMatch(/identity token refused/)
      expect(sub.events, bad.name).toEqual([])
    }
  })

  it('SSE: 401 and no event', async () => {
    for (const bad of await badTokens()) {
      const sub = sseSubscribe(s, 'subscription { waitingSteps { id } }', undefined, { raw: bad.jwt })
      expect(await sub.status, bad.name).toBe(401)
      await sub.done
      expect(
        sub.events.every((e) => e.data == null),
        bad.name,
      ).toBe(true)
    }
  })

  it('a good token works on WebSocket and SSE, and the subscription ends when it expires', async () => {
    const jwt = await token({}, { expiresIn: 2 })
    const me = wsClient(s, { raw: jwt })
    const q = wsSubscribe<{ viewer: { name: string } }>(me, VIEWER_Q)
    await q.done
    expect(q.events[0]?.data?.viewer.name).toBe('ada@example.com')
    await me.dispose()
    const sse = sseSubscribe(s, 'subscription { waitingSteps { id } }', undefined, { raw: jwt })
    expect(await sse.status).toBe(200)
    await sse.until((e) => e.data != null)
    // Expiry plus the 30 s skew would be too long to wait: the stream ends at `exp` itself.
    await sse.done
    expect(sse.events.at(-1)?.errors?.[0]?.message).toMatch(/expired/)
  })
})

describe('the console sign-in routes without OIDC_CLIENT_ID', () => {
  it('offer no SSO and exchange nothing', async () => {
    const config = await fetch(`${s.url}/auth/config`)
    expect(await config.json()).toEqual({ sso: null })
    const exchange = await fetch(`${s.url}/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: 'c', codeVerifier: 'v', redirectUri: `${s.url}/` }),
    })
    expect(exchange.status).toBe(404)
  })
})

describe('OIDC_JWKS_URL', () => {
  it('reads the keys from the configured URL instead of discovering them', async () => {
    // A key server of our own that serves the issuer's published keys and counts the fetches.
    let fetches = 0
    const keys = createServer((_req, res) => {
      fetches++
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ keys: idp.issuer.keys.toJSON() }))
    })
    await new Promise<void>((resolve) => keys.listen(0, '127.0.0.1', resolve))
    try {
      const port = (keys.address() as AddressInfo).port
      const config = loadConfig({
        OIDC_ISSUER: idp.issuer.url as string,
        OIDC_AUDIENCE: AUDIENCE,
        OIDC_ROLE_MAP: ROLE_MAP,
        OIDC_JWKS_URL: `http://127.0.0.1:${port}/keys.json`,
      }).oidc
      if (!config) throw new Error('no OIDC config')
      const verifier = new OidcVerifier({ config })
      const answer = await verifier.verify(await token({ groups: ['crew'] }))
      expect(answer).toMatchObject({ name: 'ada@example.com', role: 'viewer', source: 'oidc' })
      expect(fetches).toBe(1)
      // Cached: a second token costs no fetch.
      await verifier.verify(await token())
      expect(fetches).toBe(1)
    } finally {
      await new Promise((resolve) => keys.close(resolve))
    }
  })
})

describe('configuration', () => {
  it('needs an audience and a role map with an issuer, and an issuer for the others', () => {
    expect(() => loadConfig({ OIDC_ISSUER: 'https://id.example.com' })).toThrow(
      /OIDC_AUDIENCE is required[\s\S]*OIDC_ROLE_MAP is required/,
    )
    expect(() => loadConfig({ OIDC_AUDIENCE: 'x' })).toThrow(/OIDC_AUDIENCE set without OIDC_ISSUER/)
    expect(() =>
      loadConfig({ OIDC_ISSUER: 'https://id.example.com', OIDC_AUDIENCE: 'a', OIDC_ROLE_MAP: 'stage=boss' }),
    ).toThrow(/OIDC_ROLE_MAP entry 1 is not team=role/)
    const c = loadConfig({
      OIDC_ISSUER: 'https://id.example.com/realms/shows',
      OIDC_AUDIENCE: 'showrunner',
      OIDC_ROLE_MAP: 'stage=operator, stage=admin ,*=viewer',
      OIDC_NAME_CLAIM: 'preferred_username',
    })
    expect(c.oidc).toMatchObject({
      nameClaim: 'preferred_username',
      teamsClaim: 'groups',
      clientId: undefined,
    })
    expect([...(c.oidc?.roleMap ?? [])]).toEqual([
      ['stage', 'admin'],
      ['*', 'viewer'],
    ])
  })
})
