/**
 * A refused credential says which of three things went wrong: no token, a
 * malformed Authorization header, or a token this server does not accept (an
 * old generated one, a typo). All are UNAUTHENTICATED with HTTP 401; over
 * graphql-ws all close with 4401, with a reason that tells them apart.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Auth, startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(async () => {
  await s?.close()
})

async function refusal(headers: Record<string, string>) {
  const res = await fetch(s.graphqlUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ query: '{ health { database } }' }),
  })
  const body = (await res.json()) as { errors?: { message: string; extensions?: { code?: string } }[] }
  return { status: res.status, message: body.errors?.[0]?.message, code: body.errors?.[0]?.extensions?.code }
}

describe('refused credentials over HTTP', () => {
  it('no token: asks for the header', async () => {
    const r = await refusal({})
    expect(r).toMatchObject({ status: 401, code: 'UNAUTHENTICATED' })
    expect(r.message).toMatch(/^Authentication required: send the header/)
  })

  it('a token the server does not accept: "invalid token", not "send the header"', async () => {
    const r = await refusal({ authorization: 'Bearer an-old-token-from-an-earlier-start' })
    expect(r).toMatchObject({ status: 401, code: 'UNAUTHENTICATED' })
    expect(r.message).toMatch(/^Invalid token/)
    expect(r.message).not.toMatch(/send the header/)
  })

  it('a header that is not "Bearer <token>": says what shape is expected', async () => {
    const r = await refusal({ authorization: 'Basic dXNlcjpwYXNz' })
    expect(r).toMatchObject({ status: 401, code: 'UNAUTHENTICATED' })
    expect(r.message).toMatch(/^Invalid Authorization header: expected "Bearer <token>"/)
  })
})

describe('refused credentials over graphql-ws', () => {
  async function closedWith(auth: Auth): Promise<{ code: number; reason: string }> {
    let closed: { code: number; reason: string } | undefined
    const client = wsClient(s, auth, (e) => {
      closed ??= e
    })
    const sub = wsSubscribe(client, '{ health { ok } }')
    await sub.done.catch(() => undefined)
    await client.dispose()
    return closed ?? { code: 0, reason: '' }
  }

  it('no token and a wrong token close with 4401 and different reasons', async () => {
    const none = await closedWith(null)
    const wrong = await closedWith({ raw: 'an-old-token-from-an-earlier-start' })
    expect(none.code).toBe(4401)
    expect(wrong.code).toBe(4401)
    expect(none.reason).toMatch(/connectionParams\.authorization must be "Bearer <token>"/)
    expect(wrong.reason).toMatch(/invalid token/)
  })
})
