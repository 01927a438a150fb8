/**
 * `showrunner serve` as a newcomer meets it: no DATABASE_URL and no tokens, so it
 * starts a private MariaDB in its data folder, migrates, loads the demo, prints
 * the URL and a generated admin token, and serves. A demo run is driven to
 * COMPLETED through the API; after SIGTERM nothing it started is left running.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import mysql from 'mysql2/promise'
import { afterAll, describe, expect, it } from 'vitest'
import { findMariadbBinaries, findMariadbdProcesses } from '../src/privateMariadb.ts'
import { testServerUrl } from './helpers/db.ts'

function mariadbAvailable(): string | null {
  try {
    findMariadbBinaries()
    return null
  } catch (err) {
    return (err as Error).message
  }
}

const missing = mariadbAvailable()
if (missing) console.log(`skipping the CLI serve test: ${missing}`)

// biome-ignore lint/suspicious/noExplicitAny: GraphQL answers are checked field by field below
type Any = any

const ROOT = new URL('..', import.meta.url).pathname
const dataDir = mkdtempSync(join(tmpdir(), 'sr-cli-'))
let child: ChildProcess | undefined

afterAll(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL')
  for (const pid of findMariadbdProcesses(dataDir)) process.kill(pid, 'SIGKILL')
  rmSync(dataDir, { recursive: true, force: true })
})

/** Resolve with the first match of `pattern` in the child's stdout. */
function waitForOutput(
  proc: ChildProcess,
  pattern: RegExp,
  timeoutMs: number,
  seen: { text: string },
): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${pattern}; output so far:\n${seen.text}`)),
      timeoutMs,
    )
    const check = () => {
      const m = seen.text.match(pattern)
      if (m) {
        clearTimeout(timer)
        proc.stdout?.off('data', check)
        resolve(m)
      }
    }
    proc.stdout?.on('data', check)
    check()
  })
}

describe.skipIf(missing !== null)('showrunner serve (no DATABASE_URL)', () => {
  it('serves on a private MariaDB, completes a demo run, and leaves nothing running after SIGTERM', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', TICK_MS: '100', LOG_LEVEL: 'warn' }
    delete env.DATABASE_URL
    delete env.SHOWRUNNER_TOKENS
    delete env.HOST
    const seen = { text: '' }
    child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'serve', '--data-dir', dataDir], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    child.stdout?.on('data', (chunk: Buffer) => {
      seen.text += chunk.toString()
    })
    child.stderr?.on('data', (chunk: Buffer) => {
      seen.text += chunk.toString()
    })

    const [, token] = await waitForOutput(child, /Authorization: Bearer (\S+)/, 60_000, seen)
    const [, url] = await waitForOutput(
      child,
      /showrunner is serving on (http:\/\/127\.0\.0\.1:\d+)/,
      60_000,
      seen,
    )
    expect(findMariadbdProcesses(dataDir)).toHaveLength(1)

    const ready = await fetch(`${url}/readyz`)
    expect(ready.status).toBe(200)

    const gql = async (query: string, variables: Record<string, unknown> = {}) => {
      const res = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query, variables }),
      })
      const body = (await res.json()) as { data?: Record<string, Any>; errors?: unknown[] }
      expect(body.errors, JSON.stringify(body.errors)).toBeUndefined()
      return body.data as Record<string, Any>
    }

    const { definition } = await gql('{ definition(slug: "demo-manual") { id title } }')
    expect(definition.title).toMatch(/Demo/)
    const { startRun } = await gql(
      'mutation($d: ID!) { startRun(definitionId: $d, params: {name: "CI"}) { id } }',
      {
        d: definition.id,
      },
    )
    const runQuery =
      'query($id: ID!) { run(id: $id) { status waitingSteps steps { id kind status parked } } }'
    let run: Any
    for (let i = 0; i < 100; i++) {
      run = (await gql(runQuery, { id: startRun.id })).run
      if (run.waitingSteps === 1) break
      await new Promise((r) => setTimeout(r, 100))
    }
    expect(run.waitingSteps).toBe(1)
    const cue = run.steps.find((s: Any) => s.parked)
    const { resolveCue } = await gql('mutation($s: ID!) { resolveCue(stepId: $s, note: "go") { applied } }', {
      s: cue.id,
    })
    expect(resolveCue.applied).toBe(true)
    for (let i = 0; i < 100; i++) {
      run = (await gql(runQuery, { id: startRun.id })).run
      if (run.status === 'COMPLETED') break
      await new Promise((r) => setTimeout(r, 100))
    }
    expect(run.status).toBe('COMPLETED')

    const pid = child.pid as number
    const exited = new Promise<number | null>((resolve) => child?.once('exit', (code) => resolve(code)))
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
    expect(findMariadbdProcesses(dataDir)).toEqual([])
    // Neither the CLI nor anything it spawned is still alive.
    const alive = execFileSync('ps', ['-eo', 'pid,ppid,args'], { encoding: 'utf8' })
      .split('\n')
      .filter((line) => line.includes(dataDir) || new RegExp(`^\\s*\\d+\\s+${pid}\\s`).test(line))
    expect(alive).toEqual([])
  })
})

describe('showrunner command', () => {
  const run = (...args: string[]) =>
    execFileSync(process.execPath, [join(ROOT, 'bin/showrunner.js'), ...args], {
      cwd: ROOT,
      encoding: 'utf8',
    })

  it('migrate creates the database DATABASE_URL names when the server lacks it', async () => {
    const server = new URL(testServerUrl())
    const name = `showrunner_test_cli_${process.pid}`
    const url = new URL(server.toString())
    url.pathname = `/${name}`
    try {
      const out = execFileSync(process.execPath, [join(ROOT, 'bin/showrunner.js'), 'migrate'], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: url.toString(), LOG_LEVEL: 'warn' },
        encoding: 'utf8',
      })
      expect(out).toContain('applied: 0001_init.sql')
    } finally {
      const admin = await mysql.createConnection({ uri: server.toString() })
      await admin.query(`DROP DATABASE IF EXISTS \`${name}\``)
      await admin.end()
    }
  })

  it('prints a fresh random token each time', () => {
    const a = run('token').trim()
    const b = run('token').trim()
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(a).not.toBe(b)
  })

  it('documents every command with --help', () => {
    const help = run('--help')
    for (const command of ['serve', 'migrate', 'demo', 'token']) expect(help).toContain(command)
    expect(run('serve', '--help')).toContain('--data-dir')
  })

  it('refuses invalid configuration with a message naming the variable, exit code 2', () => {
    let code = 0
    let stderr = ''
    try {
      execFileSync(process.execPath, [join(ROOT, 'bin/showrunner.js'), 'serve'], {
        cwd: ROOT,
        env: { ...process.env, TICK_MS: 'soon', DATABASE_URL: 'mysql://root@127.0.0.1:1/none' },
        encoding: 'utf8',
        stdio: 'pipe',
      })
    } catch (err) {
      code = (err as { status: number }).status
      stderr = (err as { stderr: string }).stderr
    }
    expect(code).toBe(2)
    expect(stderr).toContain('TICK_MS')
  })
})
