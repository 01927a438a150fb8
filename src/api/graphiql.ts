/**
 * GraphiQL served entirely by this server, so it works with no network beyond
 * it (yoga's default page loads its scripts from a CDN and, offline, shows only
 * its loading text).
 *
 * The editor comes from `@graphql-yoga/render-graphiql` (pinned exactly: yoga's
 * own GraphiQL build, every asset bundled). Rather than inlining ~9 MB of
 * script into every page as that package's renderer does, the page is small
 * and points at the assets under {@link GRAPHIQL_ASSET_PATH}`<hash>/`, served
 * from memory, gzipped when the browser accepts it, and cached for a year: the
 * hash in the path changes whenever the content does. The page carries no
 * inline script (its options travel as JSON in a non-executed script tag), so a
 * strict `script-src 'self'` policy admits it.
 *
 * The bundle is loaded on the first GraphiQL request, not at start: an
 * instance nobody opens GraphiQL on never holds it in memory.
 */
import { createHash } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { gzip } from 'node:zlib'
import type { GraphiQLOptions } from 'graphql-yoga'

/** Where the assets are served: `/graphiql/<hash>/<name>`. */
export const GRAPHIQL_ASSET_PATH = '/graphiql/'

const gzipAsync = promisify(gzip)

interface Asset {
  type: string
  body: Buffer
  /** Compressed once, on first request. */
  gzipped: Promise<Buffer> | null
}

interface Bundle {
  /** Path prefix of this content, e.g. `/graphiql/3f2a…/`. */
  base: string
  favicon: string
  assets: Map<string, Asset>
}

/** What the package's bundle module exports (its internal file, read by path: the version is pinned). */
interface GraphiqlParts {
  js: string
  css: string
  favicon: string
  editorWorkerService: string
  jsonWorker: string
  graphqlWorker: string
}

// Runs before the bundle: Monaco asks this for its web workers' script URLs.
// The worker names are the labels Monaco passes; anything else gets the editor worker.
const SETUP = `(function () {
  var base = document.currentScript.getAttribute('data-base');
  var workers = { json: 'json.worker.js', graphql: 'graphql.worker.js' };
  self.MonacoEnvironment = {
    globalAPI: false,
    getWorkerUrl: function (_moduleId, label) { return base + (workers[label] || 'editor.worker.js'); },
  };
})();
`

// Runs after the bundle: renders the editor with the options the page carries.
const START = `(function () {
  var options = JSON.parse(document.getElementById('graphiql-options').textContent || '{}');
  YogaGraphiQL.renderYogaGraphiQL(document.querySelector('#root'), options);
})();
`

let bundle: Promise<Bundle> | null = null

async function loadParts(): Promise<GraphiqlParts> {
  const require = createRequire(import.meta.url)
  const entry = require.resolve('@graphql-yoga/render-graphiql')
  return (await import(pathToFileURL(join(dirname(entry), 'graphiql.js')).href)) as GraphiqlParts
}

async function loadBundle(): Promise<Bundle> {
  const parts = await loadParts()
  const js = 'text/javascript; charset=utf-8'
  const files: [string, string, string][] = [
    ['setup.js', js, SETUP],
    ['graphiql.js', js, parts.js],
    ['start.js', js, START],
    ['graphiql.css', 'text/css; charset=utf-8', parts.css],
    ['editor.worker.js', js, parts.editorWorkerService],
    ['json.worker.js', js, parts.jsonWorker],
    ['graphql.worker.js', js, parts.graphqlWorker],
  ]
  const hash = createHash('sha256')
  const assets = new Map<string, Asset>()
  for (const [name, type, text] of files) {
    const body = Buffer.from(text, 'utf8')
    hash.update(name).update(body)
    assets.set(name, { type, body, gzipped: null })
  }
  return {
    base: `${GRAPHIQL_ASSET_PATH}${hash.digest('hex').slice(0, 16)}/`,
    favicon: parts.favicon,
    assets,
  }
}

function getBundle(): Promise<Bundle> {
  bundle ??= loadBundle().catch((err) => {
    bundle = null
    throw err
  })
  return bundle
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/** JSON that cannot end the script element it sits in. */
const scriptSafeJson = (value: unknown) =>
  JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026')

/** yoga's `renderGraphiQL`: the page, pointing only at this server's assets. */
export async function renderSelfHostedGraphiQL(options: GraphiQLOptions): Promise<string> {
  const b = await getBundle()
  const title = escapeHtml(options.title ?? 'GraphiQL')
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>${title}</title>
    <link rel="icon" href="${escapeHtml(b.favicon)}" />
    <link rel="stylesheet" href="${b.base}graphiql.css" />
  </head>
  <body id="body" class="no-focus-outline">
    <noscript>GraphiQL needs JavaScript.</noscript>
    <div id="root"></div>
    <script type="application/json" id="graphiql-options">${scriptSafeJson(options)}</script>
    <script src="${b.base}setup.js" data-base="${b.base}"></script>
    <script src="${b.base}graphiql.js"></script>
    <script src="${b.base}start.js"></script>
  </body>
</html>
`
}

/**
 * Serve `/graphiql/<hash>/<name>` when `pathname` is under {@link GRAPHIQL_ASSET_PATH}.
 * Answers false (nothing sent) for any other path. A stale hash (a page from
 * before a restart with another version) is a 404: the page reloads the new one.
 */
export async function serveGraphiqlAsset(
  pathname: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const b = await getBundle()
  const asset = pathname.startsWith(b.base) ? b.assets.get(pathname.slice(b.base.length)) : undefined
  if (!asset) {
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' })
    res.end('Not found. Open GraphiQL at /graphql.')
    return
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' })
    res.end('Use GET.')
    return
  }
  const acceptsGzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))
  let body = asset.body
  if (acceptsGzip) {
    asset.gzipped ??= gzipAsync(asset.body)
    body = await asset.gzipped
  }
  res.writeHead(200, {
    'content-type': asset.type,
    'content-length': body.length,
    'cache-control': 'public, max-age=31536000, immutable',
    vary: 'accept-encoding',
    'x-content-type-options': 'nosniff',
    ...(acceptsGzip ? { 'content-encoding': 'gzip' } : {}),
  })
  res.end(req.method === 'HEAD' ? undefined : body)
}
