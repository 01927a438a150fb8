/**
 * Bundles the console (console/app, Preact + TypeScript) with esbuild, in
 * memory, once per process: `npm install` + `npm start` is all it takes, and
 * there is no build output to go stale. A build takes a few hundred
 * milliseconds; the server starts it on the first request for the page.
 */
import { createHash } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import { build } from 'esbuild'

/** One built file, plain and gzipped, with a content hash for its URL. */
export interface BuiltFile {
  body: Buffer
  gzipped: Buffer
  hash: string
}

export interface ConsoleBundle {
  js: BuiltFile
  css: BuiltFile
}

const ENTRY = fileURLToPath(new URL('./app/main.tsx', import.meta.url))

function file(text: string): BuiltFile {
  const body = Buffer.from(text, 'utf8')
  return {
    body,
    gzipped: gzipSync(body, { level: 9 }),
    hash: createHash('sha256').update(body).digest('hex').slice(0, 12),
  }
}

/** Bundle and minify the console; rejects with esbuild's messages when the code does not build. */
export async function buildConsole(): Promise<ConsoleBundle> {
  const result = await build({
    entryPoints: [ENTRY],
    bundle: true,
    write: false,
    minify: true,
    format: 'esm',
    target: 'es2022',
    platform: 'browser',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: 'console-out',
    legalComments: 'none',
    logLevel: 'silent',
  })
  const js = result.outputFiles.find((f) => f.path.endsWith('.js'))
  const css = result.outputFiles.find((f) => f.path.endsWith('.css'))
  if (!js || !css) throw new Error('the console bundle is missing its JavaScript or CSS output')
  return { js: file(js.text), css: file(css.text) }
}

let cached: Promise<ConsoleBundle> | null = null

/** The process-wide bundle, built on first use; a failed build is retried on the next call. */
export function consoleBundle(): Promise<ConsoleBundle> {
  if (!cached) {
    cached = buildConsole()
    cached.catch(() => {
      cached = null
    })
  }
  return cached
}
