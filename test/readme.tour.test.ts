/**
 * The README's tour, run as a reader would paste it, so the README cannot
 * drift from the product. Every block fenced ```sh tour is run in order by one
 * bash process (variables, functions and background jobs carry over, as in a
 * terminal) in a fresh folder, against a fresh server started there exactly as
 * `npm start` starts it: no DATABASE_URL and no tokens, so it runs its own
 * private MariaDB in `.data/mariadb` and keeps its token there. The only change
 * made to the blocks is the port (the server listens on a free one, not 4000).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { findMariadbBinaries, findMariadbdProcesses } from '../src/privateMariadb.ts'
import { captureOutput, isAlive, waitForOutput } from './helpers/processes.ts'

const ROOT = new URL('..', import.meta.url).pathname

function missingTools(): string | null {
  try {
    findMariadbBinaries()
  } catch (err) {
    return (err as Error).message
  }
  for (const tool of ['bash', 'curl', 'jq']) {
    if (spawnSync(tool, ['--version']).error) return `${tool} is not installed`
  }
  return null
}
const missing = missingTools()
if (missing) console.log(`skipping the README tour: ${missing}`)

/** The ```sh tour blocks of `markdown`, in order. */
export function tourBlocks(markdown: string): string[] {
  const blocks: string[] = []
  const fence = /^```sh tour[ \t]*\n([\s\S]*?)^```[ \t]*$/gm
  for (const m of markdown.matchAll(fence)) blocks.push(m[1] as string)
  return blocks
}

const dir = mkdtempSync(join(tmpdir(), 'sr-tour-'))
let server: ChildProcess | undefined

afterAll(async () => {
  if (server?.pid && isAlive(server.pid)) {
    const exited = new Promise((r) => server?.once('exit', r))
    server.kill('SIGTERM')
    await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))])
    if (isAlive(server.pid)) server.kill('SIGKILL')
  }
  for (const pid of findMariadbdProcesses(join(dir, '.data/mariadb'))) process.kill(pid, 'SIGKILL')
  rmSync(dir, { recursive: true, force: true })
})

describe.skipIf(missing !== null)('the README tour', () => {
  it('has its blocks marked', () => {
    const blocks = tourBlocks(readFileSync(join(ROOT, 'README.md'), 'utf8'))
    expect(blocks.length).toBeGreaterThanOrEqual(5)
  })

  it('runs block by block against a fresh server on a private MariaDB', async () => {
    const blocks = tourBlocks(readFileSync(join(ROOT, 'README.md'), 'utf8'))
    // The reader's folder is a clone: its node_modules is this one.
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', LOG_LEVEL: 'warn' }
    for (const name of ['DATABASE_URL', 'SHOWRUNNER_TOKENS', 'HOST', 'TOKEN', 'SR', 'RUN']) delete env[name]
    // What `npm start` runs, started in the reader's folder.
    server = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src/cli.ts'), 'serve'], {
      cwd: dir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const seen = captureOutput(server)
    const [, address] = await waitForOutput(server, seen, /showrunner is serving on http:\/\/(\S+)\n/, 90_000)

    const script = ['set -eo pipefail']
    blocks.forEach((block, i) => {
      script.push(`echo "@@block ${i} start"`, block.replaceAll('127.0.0.1:4000', address as string))
      script.push(`echo "@@block ${i} done"`)
    })
    writeFileSync(join(dir, 'tour.sh'), `${script.join('\n')}\n`)
    const tour = spawn('bash', ['tour.sh'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
    const out = captureOutput(tour)
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => tour.kill('SIGKILL'), 90_000)
      tour.once('exit', (c) => {
        clearTimeout(timer)
        resolve(c)
      })
    })
    const text = out.text
    const finished = [...text.matchAll(/^@@block (\d+) done$/gm)].length
    expect({ code, finished }, `the tour stopped in block ${finished}:\n${text}`).toEqual({
      code: 0,
      finished: blocks.length,
    })

    // What each step of the tour promises the reader.
    expect(text).toContain('"database":true')
    expect(text).toMatch(/"slug": "demo-manual"/)
    expect(text).toMatch(/^started run \d+$/m)
    expect(text).toMatch(/"kind":"core.cue"/)
    expect(text).toMatch(/"pauseRun":\{"applied":true,"run":\{"status":"PAUSED"\}\}/)
    expect(text).toMatch(/"resumeRun":\{"applied":true/)
    expect(text).toMatch(/"resolveCue":\{"applied":true,"step":\{"status":"COMPLETED"/)
    expect(text).toMatch(/"message": "Goodbye"/)
    expect(text).toMatch(
      /"runs":\[\{"id":"\d+","status":"COMPLETED","health":"OK","waitingSteps":0,"definition":\{"slug":"demo-manual"\}\}\]/,
    )
    expect(text).toMatch(/"cancelRun":\{"applied":false,"run":\{"status":"COMPLETED"/)
    // The watchers: the WebSocket one printed several states ending in COMPLETED, and SSE completed.
    const watched = text.split('\n').filter((l) => /^\{"id":"\d+","status":/.test(l))
    expect(watched.length, text).toBeGreaterThanOrEqual(2)
    expect(watched.at(-1)).toMatch(/"status":"COMPLETED"/)
    expect(text).toMatch(/^data: \{"data":\{"runStatus":\{"status":"COMPLETED"/m)
    expect(text).toMatch(/^event: complete$/m)
    expect(text).toMatch(/"setDefinitionState":\{"state":"PAUSED"\}/)
    expect(text).not.toMatch(/"errors"/)
  }, 180_000)

  it('leaves a watch.mjs that explains itself in one line when it cannot watch', () => {
    const run = (env: Record<string, string>) => {
      const r = spawnSync(process.execPath, ['watch.mjs', '1'], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '', ...env },
        encoding: 'utf8',
        timeout: 20_000,
      })
      return { status: r.status, lines: r.stderr.trim().split('\n') }
    }
    expect(existsSync(join(dir, 'watch.mjs')), 'the tour did not get as far as writing watch.mjs').toBe(true)
    const noToken = run({})
    expect(noToken.status).not.toBe(0)
    expect(noToken.lines).toHaveLength(1)
    expect(noToken.lines[0]).toMatch(/TOKEN/)
    const sr = readFileSync(join(dir, 'tour.sh'), 'utf8').match(/export SR=(\S+)/)?.[1] as string
    const wrong = run({ TOKEN: 'not-the-token-of-this-server', SR: sr })
    expect(wrong.status).not.toBe(0)
    expect(wrong.lines).toHaveLength(1)
    expect(wrong.lines[0]).toMatch(/^watch\.mjs: 4401 .*invalid token/)
  })
})
