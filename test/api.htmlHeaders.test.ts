/**
 * Every HTML answer (the console's page, GraphiQL at GET /graphql) carries a
 * CSP with frame-ancestors 'none' and connect-src to its own origin only,
 * X-Frame-Options: DENY and X-Content-Type-Options: nosniff. In chromium a
 * page of another origin cannot frame either, while GraphiQL itself still
 * loads under its policy without a violation.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connectSrc, htmlSecurityHeaders } from '../src/api/htmlHeaders.ts'
import { launchBrowser, newContext } from './helpers/browser.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let framer: Server
let framerOrigin: string

beforeAll(async () => {
  s = await startTestServer()
  browser = await launchBrowser()
  // Another origin (another port on another loopback address) that frames whatever ?src= names.
  framer = createServer((req, res) => {
    const src = new URL(req.url ?? '/', 'http://x').searchParams.get('src') ?? ''
    res.writeHead(200, { 'content-type': 'text/html' })
    res.end(`<!doctype html><iframe id="f" src="${src.replace(/"/g, '')}"></iframe>`)
  })
  framer.listen(0, '127.0.0.2')
  await new Promise((r) => framer.once('listening', r))
  framerOrigin = `http://127.0.0.2:${(framer.address() as AddressInfo).port}`
})
afterAll(async () => {
  await browser?.close()
  framer?.closeAllConnections()
  await new Promise((r) => framer?.close(r))
  await s?.close()
})

const PAGES = [
  ['the console', '/'],
  ['GraphiQL', '/graphql'],
] as const

function directives(csp: string | null): Map<string, string> {
  return new Map(
    (csp ?? '')
      .split(';')
      .map((d) => d.trim())
      .filter(Boolean)
      .map((d) => [d.split(' ')[0]!, d.slice(d.indexOf(' ') + 1)]),
  )
}

describe('headers on every HTML answer', () => {
  it.each(PAGES)('%s', async (_name, path) => {
    const res = await fetch(`${s.url}${path}`, { headers: { accept: 'text/html' } })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/html/)
    expect(res.headers.get('x-frame-options')).toBe('DENY')
    expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    const csp = directives(res.headers.get('content-security-policy'))
    expect(csp.get('frame-ancestors')).toBe("'none'")
    const host = new URL(s.url).host
    expect(csp.get('connect-src')).toBe(`'self' ws://${host} wss://${host}`)
  })

  it('a Host that is not a plain host leaves connect-src at self, never a wildcard or an injected directive', () => {
    for (const host of ["x; script-src 'unsafe-inline'", 'a b', '*', '', undefined, 'evil.example/x']) {
      expect(connectSrc(host)).toBe("'self'")
    }
    expect(connectSrc('[::1]:4000')).toBe("'self' ws://[::1]:4000 wss://[::1]:4000")
    expect(
      htmlSecurityHeaders({ host: "x; script-src 'unsafe-inline'" })['content-security-policy'],
    ).not.toContain('unsafe-inline')
  })
})

describe('in chromium', () => {
  it.each(PAGES)('another origin cannot frame %s', async (_name, path) => {
    const context = await newContext(browser)
    const page = await context.newPage()
    await page.goto(`${framerOrigin}/?src=${encodeURIComponent(`${s.url}${path}`)}`)
    const frame = page.frames().find((f) => f !== page.mainFrame())
    // A blocked frame never commits our document: its URL is not ours, or it has no body of ours.
    await page.waitForTimeout(500)
    const framed = frame ? await frame.evaluate(() => document.title).catch(() => '') : ''
    expect(framed).not.toMatch(/showrunner/)
    await context.close()
  })

  it('GraphiQL loads under its policy with no CSP violation', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    const violations: string[] = []
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text())
    })
    await page.goto(`${s.url}/graphql`)
    await page.locator('.monaco-editor').first().waitFor({ timeout: 30_000 })
    expect(violations).toEqual([])
    await context.close()
  })
})
