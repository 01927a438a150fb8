/**
 * Forgiving sign-in in chromium: the line the server prints
 * (`Authorization: Bearer <token>`), `Bearer <token>` and surrounding
 * whitespace are accepted; a refusal says whether the token is one the server
 * does not know or a key it knows that expired or was revoked; what was
 * pasted can be shown.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations } from './helpers/browser.ts'
import { startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let browser: Browser
beforeAll(async () => {
  ;[s, browser] = await Promise.all([startTestServer(), launchBrowser()])
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
})

async function attempt(pasted: string): Promise<Page> {
  const page = await (await newContext(browser)).newPage()
  await page.goto(`${s.url}/`)
  await page.getByLabel('Access token').fill(pasted)
  await page.getByRole('button', { name: 'Sign in' }).click()
  return page
}

async function makeKey(expiresAt: string | null): Promise<{ id: string; secret: string }> {
  const res = await s.gql<{ createApiKey: { key: { id: string }; secret: string } }>(
    'mutation ($e: DateTime) { createApiKey(name: "Stage door", role: OPERATOR, expiresAt: $e) { key { id } secret } }',
    { variables: { e: expiresAt } },
  )
  expect(res.body.errors).toBeUndefined()
  return {
    id: res.body.data?.createApiKey.key.id as string,
    secret: res.body.data?.createApiKey.secret as string,
  }
}

describe('sign-in', () => {
  for (const [what, pasted] of [
    ['the line the server prints', `  Authorization: Bearer ${TOKENS.operator}  \n`],
    ['a Bearer prefix', `Bearer ${TOKENS.operator}`],
    ['whitespace around the token', `\t${TOKENS.operator}\n`],
  ] as const) {
    it(`accepts ${what}`, async () => {
      const page = await attempt(pasted)
      await page.getByTestId('role').waitFor()
      expect(await page.getByTestId('role').textContent()).toBe('operator')
      await page.context().close()
    })
  }

  it('a token the server does not know: says so', async () => {
    const page = await attempt('Bearer nobody-issued-this-0000')
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/^Not a token this server knows/)
    expect(await seriousViolations(page)).toEqual([])
    // What was pasted can be read back.
    expect(await page.getByLabel('Access token').getAttribute('type')).toBe('password')
    await page.getByLabel('Show what I pasted').check()
    expect(await page.getByLabel('Access token').inputValue()).toBe('Bearer nobody-issued-this-0000')
    expect(await page.getByLabel('Access token').getAttribute('type')).toBe('text')
    await page.context().close()
  })

  it('a revoked key and an expired one: "expired / revoked"', async () => {
    const revoked = await makeKey(null)
    expect((await s.gql(`mutation { revokeApiKey(id: "${revoked.id}") { id } }`)).body.errors).toBeUndefined()
    const page = await attempt(`Authorization: Bearer ${revoked.secret}`)
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/^Expired \/ revoked: .*revoked/)
    await page.context().close()

    const expiring = await makeKey(new Date(Date.now() + 1500).toISOString())
    await new Promise((r) => setTimeout(r, 2500))
    const late = await attempt(expiring.secret)
    await expect(late.getByRole('alert').textContent()).resolves.toMatch(/^Expired \/ revoked: .*expired/)
    await late.context().close()
  })
})
