/**
 * The private database across restarts, as a person meets it: the admin token
 * printed at the first start is kept in the data folder (mode 0600) and still
 * works after a restart; SHOWRUNNER_TOKENS, when set, replaces it; and
 * `showrunner demo` while the server runs is refused with a command that
 * works, which is then run as printed.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { findMariadbBinaries, findMariadbdProcesses } from '../src/privateMariadb.ts'
import { captureOutput, isAlive, waitForOutput } from './helpers/processes.ts'

function mariadbMissing(): string | null {
  try {
    findMariadbBinaries()
    return null
  } catch (err) {
    return (err as Error).message
  }
}
const missing = mariadbMissing()
if (missing) console.log(`skipping the first-run test: ${missing}`)

const ROOT = new URL('..', import.meta.url).pathname
const dataDir = mkdtempSync(join(tmpdir(), 'sr-first-'))
const children: ChildProcess[] = []

afterAll(() => {
  for (const c of children) if (c.pid && isAlive(c.pid)) c.kill('SIGKILL')
  for (const pid of findMariadbdProcesses(dataDir)) process.kill(pid, 'SIGKILL')
  rmSync(dataDir, { recursive: true, force: true })
})

function baseEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', TICK_MS: '200', LOG_LEVEL: 'warn', ...extra }
  delete env.DATABASE_URL
  if (!('SHOWRUNNER_TOKENS' in extra)) delete env.SHOWRUNNER_TOKENS
  delete env.HOST
  return env
}

async function serve(extra: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'serve', '--data-dir', dataDir], {
    cwd: ROOT,
    env: baseEnv(extra),
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  const seen = captureOutput(child)
  const [, url] = await waitForOutput(child, seen, /showrunner is serving on (http:\/\/\S+)\n/, 60_000)
  const status = async (token: string) => {
    const res = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: '{ definitions { slug } }' }),
    })
    const body = (await res.json()) as { errors?: { message: string }[] }
    return { status: res.status, message: body.errors?.[0]?.message ?? null }
  }
  const stop = async () => {
    const exited = new Promise((r) => child.once('exit', r))
    child.kill('SIGTERM')
    await exited
  }
  return { child, seen, url, status, stop }
}

describe.skipIf(missing !== null)('the private database across restarts', () => {
  it('keeps the admin token, lets SHOWRUNNER_TOKENS win, and refuses demo with a command that works', async () => {
    const tokenFile = join(dataDir, 'admin-token')

    const first = await serve()
    const [, printed] = first.seen.text.match(/Authorization: Bearer (\S+)/) ?? []
    expect(printed).toBeDefined()
    expect(first.seen.text).toContain(`kept in ${tokenFile}`)
    expect(readFileSync(tokenFile, 'utf8').trim()).toBe(printed)
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600)
    expect((await first.status(printed as string)).status).toBe(200)

    // While it runs, `demo` cannot start a second server on the folder: it
    // says so and prints the command that shares the running one.
    let refusal = ''
    try {
      execFileSync(process.execPath, ['bin/showrunner.js', 'demo', '--data-dir', dataDir], {
        cwd: ROOT,
        env: baseEnv(),
        encoding: 'utf8',
        stdio: 'pipe',
      })
    } catch (err) {
      refusal = (err as { stderr: string }).stderr
    }
    const suggested = refusal.match(/DATABASE_URL='([^']+)' npx showrunner demo/)
    expect(suggested, refusal).not.toBeNull()
    const out = execFileSync(process.execPath, ['bin/showrunner.js', 'demo'], {
      cwd: ROOT,
      env: { ...baseEnv(), DATABASE_URL: suggested?.[1] as string },
      encoding: 'utf8',
    })
    expect(out).toContain('the demo definitions already exist')
    await first.stop()

    const second = await serve()
    expect(second.seen.text).toContain(`Authorization: Bearer ${printed}`)
    expect((await second.status(printed as string)).status).toBe(200)
    await second.stop()

    const configured = 'admin-token-from-the-environment-0123'
    const third = await serve({ SHOWRUNNER_TOKENS: `admin:${configured}` })
    expect(third.seen.text).not.toContain(printed as string)
    expect((await third.status(configured)).status).toBe(200)
    const old = await third.status(printed as string)
    expect(old.status).toBe(401)
    expect(old.message).toMatch(/^Invalid token/)
    await third.stop()
    expect(findMariadbdProcesses(dataDir)).toEqual([])
  }, 180_000)
})
