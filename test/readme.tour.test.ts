/**
 * The README's tour, run as a reader would paste it, so the README cannot
 * drift from the product. Every block fenced ```sh tour is run in order by one
 * bash process (variables, functions and background jobs carry over, as in a
 * terminal) in a fresh folder, against a fresh server started there exactly as
 * `npm start` starts it: no DATABASE_URL and no tokens, so it runs its own
 * private MariaDB in `.data/mariadb` and keeps its token there. The only change
 * made to the blocks is the port (the server listens on a free one, not 4000).
 * The tour uses `npx showrunner`, so the folder is a clone: the package's own
 * files are linked in beside node_modules (npx runs offline: never a download).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
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

/** What a clone has that the tour uses (the command, its sources, the example shows). */
const CLONE = ['node_modules', 'package.json', 'bin', 'src', 'sql', 'schema', 'resolvers', 'console', 'shows']

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
    // The reader's folder is a clone: its node_modules, its sources and its shows/ are this one's.
    for (const entry of CLONE) symlinkSync(join(ROOT, entry), join(dir, entry))
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: '0',
      LOG_LEVEL: 'warn',
      npm_config_offline: 'true',
      npm_config_update_notifier: 'false',
    }
    for (const name of [
      'DATABASE_URL',
      'SHOWRUNNER_TOKENS',
      'SHOWRUNNER_TOKEN',
      'SHOWRUNNER_URL',
      'HOST',
      'RUN',
    ])
      delete env[name]
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
    expect(text).toMatch(/^ok: true {3}database: true/m)
    expect(text).toMatch(/^slug: demo-manual$/m)
    expect(text).toMatch(/^started run \d+$/m)
    expect(text).toMatch(/^STEP\s+RUN\s+DEFINITION\s+SCOPE\s+PHASE\s+WAITING\s+FOR\s+PROMPT$/m)
    expect(text).toMatch(/demo-manual\s+""\s+main\s+.*Ready when you are$/m)
    expect(text).toMatch(/^paused run \d+: now PAUSED$/m)
    expect(text).toMatch(/^resumed run \d+: now RUNNING$/m)
    expect(text).toMatch(/^resolved step \d+: now COMPLETED/m)
    expect(text).toMatch(/^exit 3: answered already$/m)
    // The watcher printed several states, ending in COMPLETED.
    const watched = readFileSync(join(dir, 'watch.log'), 'utf8').trim().split('\n')
    expect(watched.length, text).toBeGreaterThanOrEqual(2)
    expect(watched.at(-1)).toMatch(/ COMPLETED /)
    expect(text).toMatch(/^\d+\s+demo-manual\s+""\s+COMPLETED\s+OK\s/m)
    expect(text).toMatch(/^exit 3: the run had ended$/m)
    expect(text).toContain('+ pub-quiz (create, version 1)')
    expect(text).toMatch(/^CREATE\s+pub-quiz\s+\S+\s+1$/m)
    expect(text).toMatch(/^UNCHANGED\s+pub-quiz\s+-\s+-$/m)
    expect(text).toContain('~ pub-quiz (update, version 2)')
    expect(text).toContain('+ main[0] core.cue {"params":{"prompt":"Read the first question"}}')
    expect(text).toMatch(/"scopes":\["upstairs","cellar"\],"currentVersion":\{"version":1\}/)
    expect(text).not.toMatch(/"errors"/)
  }, 180_000)
})
