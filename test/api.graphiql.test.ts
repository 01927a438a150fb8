/**
 * GraphiQL is served whole by this server: the page names no other host, and
 * every script and style it loads (and every web worker its editor starts) is
 * answered here, cacheably and gzipped on request.
 */
import { gunzipSync } from 'node:zlib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(async () => {
  await s?.close()
})

async function page(): Promise<string> {
  const res = await fetch(s.graphqlUrl, { headers: { accept: 'text/html' } })
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toMatch(/text\/html/)
  return res.text()
}

/** Every URL the page makes the browser fetch: script src, link href, CSS url(), and the editor's workers. */
function referencedUrls(html: string): string[] {
  const urls: string[] = []
  for (const m of html.matchAll(/<(?:script|img|iframe)\b[^>]*\bsrc="([^"]*)"/gi)) urls.push(m[1] as string)
  for (const m of html.matchAll(/<link\b[^>]*\bhref="([^"]*)"/gi)) urls.push(m[1] as string)
  for (const m of html.matchAll(/url\(\s*['"]?([^'")]+)/gi)) urls.push(m[1] as string)
  return urls
}

describe('GraphiQL, self-hosted', () => {
  it('the page references no other host and no inline script; the yoga CDN page is gone', async () => {
    const html = await page()
    expect(html).toContain('<title>showrunner GraphiQL</title>')
    expect(html).not.toContain('__TITLE__')
    expect(html).not.toMatch(/unpkg|jsdelivr|cdnjs|esm\.sh/i)
    // Outside the JSON options block, nothing names an http(s) origin.
    const withoutOptions = html.replace(/<script type="application\/json"[\s\S]*?<\/script>/, '')
    expect(withoutOptions).not.toMatch(/(?:https?:)?\/\/[a-z0-9.-]+\.[a-z]{2,}/i)
    // Every executable script is an external file of ours: a strict CSP admits the page.
    for (const m of withoutOptions.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)) {
      expect(m[1]).toMatch(/\bsrc="\/graphiql\//)
      expect((m[2] as string).trim()).toBe('')
    }
  })

  it('every script, style and worker it loads is served 200 by this server, cacheable, gzipped on request', async () => {
    const html = await page()
    const urls = referencedUrls(html).filter((u) => !u.startsWith('data:'))
    const base = /data-base="([^"]+)"/.exec(html)?.[1] as string
    expect(base).toMatch(/^\/graphiql\/[0-9a-f]{16}\/$/)
    // Monaco's workers are started from these URLs (setup.js names them).
    const setup = await (await fetch(`${s.url}${base}setup.js`)).text()
    for (const m of setup.matchAll(/'([a-z]+\.worker\.js)'/g)) urls.push(`${base}${m[1]}`)
    expect(urls.length).toBeGreaterThanOrEqual(6)
    for (const u of urls) {
      expect(u.startsWith('/'), u).toBe(true)
      const res = await fetch(`${s.url}${u}`, { headers: { 'accept-encoding': 'identity' } })
      expect(res.status, u).toBe(200)
      expect(res.headers.get('content-type'), u).toMatch(/^text\/(javascript|css)/)
      expect(res.headers.get('cache-control'), u).toMatch(/immutable/)
      expect((await res.arrayBuffer()).byteLength, u).toBeGreaterThan(100)
    }
    // The big bundle travels compressed when the browser accepts it.
    const raw = await fetch(`${s.url}${base}graphiql.js`, { headers: { 'accept-encoding': 'identity' } })
    const rawBytes = Buffer.from(await raw.arrayBuffer())
    const { request } = await import('node:http')
    const gz = await new Promise<{ encoding: string | undefined; body: Buffer }>((resolve, reject) => {
      const req = request(`${s.url}${base}graphiql.js`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () =>
          resolve({ encoding: res.headers['content-encoding'], body: Buffer.concat(chunks) }),
        )
      })
      req.on('error', reject)
      req.end()
    })
    expect(gz.encoding).toBe('gzip')
    expect(gz.body.length).toBeLessThan(rawBytes.length / 2)
    expect(gunzipSync(gz.body).equals(rawBytes)).toBe(true)
  })

  it('an unknown or stale asset path is a 404, a POST a 405', async () => {
    expect((await fetch(`${s.url}/graphiql/0000000000000000/graphiql.js`)).status).toBe(404)
    const html = await page()
    const base = /data-base="([^"]+)"/.exec(html)?.[1] as string
    expect((await fetch(`${s.url}${base}nope.js`)).status).toBe(404)
    expect((await fetch(`${s.url}${base}graphiql.js`, { method: 'POST' })).status).toBe(405)
  })

  it('the options cannot break out of their script element', async () => {
    const html = await page()
    const json = /<script type="application\/json" id="graphiql-options">([\s\S]*?)<\/script>/.exec(html)?.[1]
    expect(json).toBeDefined()
    expect(json).not.toMatch(/[<>]/)
    expect(JSON.parse(json as string).title).toBe('showrunner GraphiQL')
  })
})
