/**
 * Serves the console: `GET /` is the page (no token needed to load it; every
 * request it makes carries one), `/console/app.js` and `/console/app.css` the
 * bundle. Everything comes from this process: no CDN, no internet.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { gzipSync } from 'node:zlib'
import { htmlSecurityHeaders } from '../src/api/htmlHeaders.ts'
import { type BuiltFile, type ConsoleBundle, consoleBundle } from './build.ts'

export const CONSOLE_PATHS = new Set(['/', '/index.html', '/console/app.js', '/console/app.css'])

export interface ConsoleOptions {
  /** How often the page re-reads what no subscription pushes (ms). */
  pollMs: number
  onBuildError(err: unknown): void
}

/** The page loads only its own script and style and talks only to this origin (src/api/htmlHeaders.ts). */
function securityHeaders(req: IncomingMessage): Record<string, string> {
  return htmlSecurityHeaders({ host: req.headers.host })
}

function page(bundle: ConsoleBundle, pollMs: number): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="showrunner-poll-ms" content="${pollMs}">
<title>showrunner console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/app.css?v=${bundle.css.hash}">
<script type="module" src="/console/app.js?v=${bundle.js.hash}"></script>
</head>
<body>
<div id="app"><noscript>The showrunner console needs JavaScript.</noscript></div>
</body>
</html>
`
}

function send(
  req: IncomingMessage,
  res: ServerResponse,
  type: string,
  file: Pick<BuiltFile, 'body' | 'gzipped'>,
  cache: string,
): void {
  const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))
  const body = gzip ? file.gzipped : file.body
  res.writeHead(200, {
    'content-type': type,
    'content-length': body.length,
    'cache-control': cache,
    vary: 'accept-encoding',
    ...(gzip ? { 'content-encoding': 'gzip' } : {}),
    ...securityHeaders(req),
  })
  res.end(req.method === 'HEAD' ? undefined : body)
}

/** A request handler for {@link CONSOLE_PATHS}. */
export function createConsoleHandler(opts: ConsoleOptions) {
  let html: { bundle: ConsoleBundle; file: Pick<BuiltFile, 'body' | 'gzipped'> } | null = null
  return async function handleConsole(
    req: IncomingMessage,
    res: ServerResponse,
    pathname: string,
  ): Promise<void> {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' })
      res.end('Use GET.\n')
      return
    }
    let bundle: ConsoleBundle
    try {
      bundle = await consoleBundle()
    } catch (err) {
      opts.onBuildError(err)
      res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' })
      res.end('The console could not be built; the server log says why. The API at /graphql is unaffected.\n')
      return
    }
    if (pathname === '/console/app.js') {
      send(req, res, 'text/javascript; charset=utf-8', bundle.js, 'public, max-age=31536000, immutable')
      return
    }
    if (pathname === '/console/app.css') {
      send(req, res, 'text/css; charset=utf-8', bundle.css, 'public, max-age=31536000, immutable')
      return
    }
    if (html?.bundle !== bundle) {
      const body = Buffer.from(page(bundle, opts.pollMs), 'utf8')
      html = { bundle, file: { body, gzipped: gzipSync(body) } }
    }
    send(req, res, 'text/html; charset=utf-8', html.file, 'no-store')
  }
}
