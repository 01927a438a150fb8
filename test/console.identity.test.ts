/**
 * People in the console, in chromium against a real server and
 * oauth2-mock-server on loopback: "Sign in with SSO" (authorization code +
 * PKCE, no client secret), the signed-in person's name, and the admins' keys
 * page (make a key, its secret shown once, revoke it).
 */
import { OAuth2Server } from 'oauth2-mock-server'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, signIn } from './helpers/browser.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const AUDIENCE = 'showrunner-api'
const CLIENT_ID = 'showrunner-console'
let idp: OAuth2Server
let s: TestServer
let browser: Browser

beforeAll(async () => {
  idp = new OAuth2Server()
  await idp.issuer.keys.generate('RS256')
  await idp.start(0, '127.0.0.1')
  // The provider's access token carries the audience, a name and groups, as a configured one would.
  idp.service.on('beforeTokenSigning', (token) => {
    Object.assign(token.payload, { aud: AUDIENCE, email: 'ada@example.com', groups: ['producers', 'crew'] })
  })
  s = await startTestServer({
    env: {
      OIDC_ISSUER: idp.issuer.url as string,
      OIDC_AUDIENCE: AUDIENCE,
      OIDC_ROLE_MAP: 'crew=viewer,producers=admin',
      OIDC_CLIENT_ID: CLIENT_ID,
    },
  })
  browser = await launchBrowser()
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await idp?.stop()
})

describe('single sign-on', () => {
  it('the public config names the issuer and client, nothing secret', async () => {
    const res = await fetch(`${s.url}/auth/config`)
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({
      sso: {
        issuer: idp.issuer.url,
        clientId: CLIENT_ID,
        authorizationEndpoint: `${idp.issuer.url}/authorize`,
        scope: 'openid profile email',
        audience: AUDIENCE,
      },
    })
  })

  it('refuses a code exchange that is not JSON or lacks its fields', async () => {
    const form = await fetch(`${s.url}/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'code=x',
    })
    expect(form.status).toBe(415)
    const empty = await fetch(`${s.url}/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"code": 1}',
    })
    expect(empty.status).toBe(400)
    const garbage = await fetch(`${s.url}/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{nope',
    })
    expect(garbage.status).toBe(400)
    expect((await fetch(`${s.url}/auth/token`)).status).toBe(405)
  })

  it('"Sign in with SSO" goes to the provider with a PKCE challenge and comes back signed in by name', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    const authorize: URL[] = []
    const bodies: string[] = []
    page.on('request', (req) => {
      if (req.url().startsWith(`${idp.issuer.url}/authorize`)) authorize.push(new URL(req.url()))
      const body = req.postData()
      if (body) bodies.push(body)
    })
    await page.goto(`${s.url}/#/definitions`)
    await page.getByRole('button', { name: 'Sign in with SSO' }).click()
    await page.getByTestId('who').waitFor()
    expect(await page.getByTestId('who').textContent()).toBe('ada@example.com')
    expect(await page.getByTestId('role').textContent()).toBe('admin')
    // The code left the address bar, and the page is where the person started.
    expect(new URL(page.url()).search).toBe('')
    expect(new URL(page.url()).hash).toBe('#/definitions')
    expect(authorize).toHaveLength(1)
    const q = authorize[0]?.searchParams
    expect(q?.get('response_type')).toBe('code')
    expect(q?.get('client_id')).toBe(CLIENT_ID)
    expect(q?.get('code_challenge_method')).toBe('S256')
    expect(q?.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(q?.get('state')).toMatch(/^[A-Za-z0-9_-]{22}$/)
    // The browser sends the verifier to its own server and no secret anywhere.
    const exchange = bodies.find((b) => b.includes('codeVerifier'))
    expect(exchange).toBeDefined()
    expect(bodies.join('\n')).not.toMatch(/client_secret/)
    await context.close()
  })

  it('a return with a state this tab did not make is refused', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    await page.goto(`${s.url}/?code=stolen&state=forged`)
    await page.getByRole('alert').waitFor()
    expect(await page.getByRole('alert').textContent()).toMatch(/did not start from this tab/)
    expect(new URL(page.url()).search).toBe('')
    await context.close()
  })
})

describe('the keys page', () => {
  it('an admin makes a key (secret shown once), sees it listed, and revokes it', async () => {
    const context = await newContext(browser)
    const page = await signIn(context, s.url, 'admin', '#/keys')
    await page.getByRole('heading', { name: 'API keys' }).waitFor()
    await page.getByLabel('Name (the person or service holding it)').fill('Grace Hopper')
    await page.getByLabel('Role').selectOption('OPERATOR')
    await page.getByLabel('Teams (comma-separated, optional)').fill('stage, sound')
    await page.getByRole('button', { name: 'Make key' }).click()
    const secret = (await page.getByTestId('new-secret').locator('code').textContent()) ?? ''
    expect(secret).toMatch(/^sr_live_/)
    const me = await s.gql<{ viewer: { name: string; role: string; teams: string[] } }>(
      '{ viewer { name role teams } }',
      { auth: { raw: secret } },
    )
    expect(me.body.data?.viewer).toEqual({
      name: 'Grace Hopper',
      role: 'OPERATOR',
      teams: ['stage', 'sound'],
    })
    const row = page.getByTestId('keys').getByRole('row', { name: /Grace Hopper/ })
    await row.waitFor()
    expect(await row.textContent()).toContain(secret.slice(0, 12))
    // Acknowledged, the secret is gone from the page for good.
    await page.getByRole('button', { name: 'I have copied it' }).click()
    expect(await page.content()).not.toContain(secret)
    page.once('dialog', (d) => void d.accept())
    await row.getByRole('button', { name: 'Revoke Grace Hopper' }).click()
    await row.getByText(/revoked/).waitFor()
    const after = await s.gql('{ viewer { name } }', { auth: { raw: secret } })
    expect(after.status).toBe(401)
    await context.close()
  })

  it('a console signed in with a key is signed out when the key is revoked', async () => {
    const made = await s.gql<{ createApiKey: { key: { id: string }; secret: string } }>(
      'mutation { createApiKey(name: "Night Desk", role: VIEWER) { key { id } secret } }',
    )
    const { key, secret } = made.body.data?.createApiKey ?? { key: { id: '' }, secret: '' }
    const context = await newContext(browser)
    const page = await context.newPage()
    await page.goto(`${s.url}/#/inbox`)
    await page.getByLabel('Access token').fill(secret)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    expect(await page.getByTestId('who').textContent()).toBe('Night Desk')
    // The inbox holds a live subscription; revoking the key closes it with 4401.
    await page.locator('main h1').first().waitFor()
    await s.gql(`mutation { revokeApiKey(id: "${key.id}") { id } }`)
    await page.getByLabel('Access token').waitFor({ timeout: 5000 })
    expect(await page.getByRole('alert').textContent()).toMatch(/no longer accepts/)
    await context.close()
  })

  it('is not offered to operators', async () => {
    const context = await newContext(browser)
    const page = await signIn(context, s.url, 'operator')
    expect(await page.getByRole('link', { name: 'API keys' }).count()).toBe(0)
    const admin = await signIn(context, s.url, 'admin')
    expect(await admin.getByRole('link', { name: 'API keys' }).count()).toBe(1)
    await context.close()
  })
})
