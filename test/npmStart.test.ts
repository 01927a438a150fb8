/**
 * `npm start` under a process manager: SIGTERM goes to the npm process, and
 * the server must still stop gracefully (release its claims) and leave nothing
 * running. npm passes the signal to the script's shell only; a shell that does
 * not hand it on (Debian's dash) would orphan the server, which is why the
 * script execs node.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, describe, expect, it } from 'vitest'
import { createTestDb, type TestDb } from './helpers/db.ts'
import {
  captureOutput,
  commandOf,
  descendantsOf,
  isAlive,
  waitForExit,
  waitForOutput,
} from './helpers/processes.ts'

const ROOT = new URL('..', import.meta.url).pathname
const TOKEN = 'admin-token-for-the-npm-start-test'

let t: TestDb | undefined
let npm: ChildProcess | undefined
const started: number[] = []
let seq = 0
let hang: Server | undefined

afterAll(async () => {
  // Whatever this test started and is still alive (the orphan a broken script leaves).
  for (const pid of [...started, ...(npm?.pid ? [npm.pid] : [])]) {
    if (isAlive(pid)) process.kill(pid, 'SIGKILL')
  }
  hang?.closeAllConnections()
  await new Promise((r) => (hang ? hang.close(r) : r(undefined)))
  await t?.drop()
})

/**
 * Start `npm start`, make it hold a claim, deliver `stop(npmPid)`, and assert
 * the claim was released and no process it started is left.
 */
async function holdClaimThenStop(stop: (npmPid: number) => void, opts: { detached?: boolean } = {}) {
  t ??= await createTestDb()
  // A webhook receiver that never answers keeps a step executing, so the
  // server holds a claim on its run when the signal arrives.
  let received = 0
  hang = createServer(() => {
    received++
  })
  await new Promise<void>((r) => hang?.listen(0, '127.0.0.1', r))
  const hookUrl = `http://127.0.0.1:${(hang.address() as AddressInfo).port}/`

  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: t.url,
    PORT: '0',
    HOST: '127.0.0.1',
    SHOWRUNNER_TOKENS: `admin:${TOKEN}`,
    TICK_MS: '100',
    LEASE_MS: '6000',
    WEBHOOK_ALLOW: hookUrl,
    LOG_LEVEL: 'warn',
  }
  npm = spawn('npm', ['start'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached ?? false,
  })
  const seen = captureOutput(npm)
  const [, url] = await waitForOutput(npm, seen, /showrunner is serving on (http:\/\/\S+)\n/, 60_000)

  const gql = async (query: string, variables: Record<string, unknown> = {}) => {
    const res = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
      body: JSON.stringify({ query, variables }),
    })
    const body = (await res.json()) as { data?: Record<string, { id: string }>; errors?: unknown[] }
    expect(body.errors, JSON.stringify(body.errors)).toBeUndefined()
    return body.data as Record<string, { id: string }>
  }
  const program = {
    phases: [
      {
        name: 'call',
        steps: [
          { kind: 'core.webhook', params: { url: hookUrl }, timeoutSeconds: 60, retry: { attempts: 1 } },
        ],
      },
    ],
  }
  const { createDefinition } = await gql(
    'mutation($p: JSON!, $s: String!) { createDefinition(input: {slug: $s, title: "Hang", program: $p}) { id } }',
    { p: program, s: `hang-${++seq}` },
  )
  const { startRun } = await gql('mutation($d: ID!) { startRun(definitionId: $d) { id } }', {
    d: createDefinition?.id,
  })
  const runId = Number(startRun?.id)
  const claimedBy = async () => {
    const rows = await t?.db.execute<{ claimed_by: string | null }>(
      'SELECT claimed_by FROM event_runs WHERE id = ?',
      [runId],
    )
    return rows?.[0]?.claimed_by ?? null
  }
  const deadline = Date.now() + 20_000
  while ((received === 0 || (await claimedBy()) === null) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100))
  }
  expect(received).toBe(1)
  expect(await claimedBy()).not.toBeNull()

  started.push(...descendantsOf(npm.pid as number))
  const server = started.map(commandOf).find((c) => c.includes('src/cli.ts serve'))
  expect(server).toBeDefined()
  // The server runs without V8's memory reducer: its idle-time heap compaction
  // pauses the process for about 20 ms, and lands on the next tick, a start.
  expect(server).toContain('--no-memory-reducer')

  const exited = new Promise<number | null>((r) => npm?.once('exit', (code) => r(code)))
  stop(npm.pid as number)
  await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))])
  expect(isAlive(npm.pid as number)).toBe(false)
  const left = await waitForExit(started, 15_000)
  expect(left.map((pid) => `${pid} ${commandOf(pid)}`)).toEqual([])
  expect(await claimedBy()).toBeNull()
  expect(seen.text).not.toContain('exiting without waiting')
  hang?.closeAllConnections()
  await new Promise((r) => hang?.close(r))
  hang = undefined
}

describe('npm start', () => {
  it('stops gracefully on a SIGTERM sent to npm: claims released, no process left', async () => {
    await holdClaimThenStop((pid) => process.kill(pid, 'SIGTERM'))
  }, 120_000)

  it('stops gracefully on Ctrl-C, which reaches npm and the server both', async () => {
    // A terminal sends SIGINT to the whole foreground process group; npm then
    // forwards it again. The server must take the pair as one request.
    await holdClaimThenStop((pid) => process.kill(-pid, 'SIGINT'), { detached: true })
  }, 120_000)
})
