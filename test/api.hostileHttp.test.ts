/**
 * No request ends the process: malformed request targets, Host headers and
 * bodies, sent raw over a socket, are answered 4xx and the server keeps
 * answering; an error that escapes every handler is logged and the process
 * either keeps serving (a rejection) or stops the graceful way (an exception).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { rawRequest } from './helpers/rawHttp.ts'
import { eventually, SHOWRUNNER_TOKENS, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(async () => {
  await s?.close()
})

const AUTH = `Authorization: Bearer ${TOKENS.admin}\r\n`

/** Requests a hostile or broken client sends, and the status each must get (a 4xx). */
const MALFORMED: [string, string, number][] = [
  ['absolute target with a port out of range', 'GET http://a:99999/ HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['same, on the GraphQL path', `GET http://a:99999/graphql HTTP/1.1\r\nHost: x\r\n${AUTH}\r\n`, 400],
  ['same, on a probe', 'GET http://a:99999/healthz HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  [
    'Host with a port out of range',
    `GET /graphql?query={__typename} HTTP/1.1\r\nHost: a:99999\r\n${AUTH}\r\n`,
    400,
  ],
  ['Host that is not a host', `GET /graphql?query={__typename} HTTP/1.1\r\nHost: [zz\r\n${AUTH}\r\n`, 400],
  ['asterisk target', 'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n', 404],
  [
    'truncated JSON body',
    `POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${AUTH}Content-Length: 5\r\n\r\n{"a":`,
    400,
  ],
  [
    'broken chunked encoding',
    `POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${AUTH}Transfer-Encoding: chunked\r\n\r\nzz\r\n`,
    400,
  ],
  ['header without a colon', 'GET /healthz HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n', 400],
  ['not HTTP at all', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n', 400],
  [
    'upgrade to a WebSocket without a key',
    'GET /graphql HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n',
    400,
  ],
]

describe('malformed requests over a raw socket', () => {
  it.each(MALFORMED)('%s → 4xx, and the server still answers', async (_name, request, status) => {
    const answer = await rawRequest(s.url, request)
    expect(answer.status, answer.text.slice(0, 300)).toBe(status)
    const health = await fetch(`${s.url}/healthz`)
    expect(health.status).toBe(200)
  })

  it('a refused request target says why, without echoing internals', async () => {
    const answer = await rawRequest(s.url, 'GET http://a:99999/ HTTP/1.1\r\nHost: x\r\n\r\n')
    expect(answer.text).toMatch(/Bad request: the request target is not a valid path or URL/)
    expect(answer.text).not.toMatch(/TypeError|at .*\.ts:\d+/)
  })

  it('GraphQL still works after all of them', async () => {
    for (const [, request] of MALFORMED) await rawRequest(s.url, request)
    const res = await s.gql('{ __typename }')
    expect(res.status).toBe(200)
    expect(res.body.data).toEqual({ __typename: 'Query' })
  })
})

describe('errors that escape every handler (a server process as npm start builds it)', () => {
  const fixture = fileURLToPath(new URL('./fixtures/lastResortServer.ts', import.meta.url))
  const repoRoot = fileURLToPath(new URL('..', import.meta.url))
  let t: TestDb
  let child: ChildProcess | null = null
  let output = ''
  let url = ''

  beforeAll(async () => {
    t = await createTestDb()
    child = spawn(process.execPath, ['--import', 'tsx', fixture], {
      cwd: repoRoot,
      env: { ...process.env, DATABASE_URL: t.url, SHOWRUNNER_TOKENS, RUNNER: 'on', TICK_MS: '100' },
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    child.stdout?.on('data', (d: Buffer) => (output += d.toString()))
    child.stderr?.on('data', (d: Buffer) => (output += d.toString()))
    url = await eventually(() => /^ready (\S+)$/m.exec(output)?.[1], 30_000).catch((err) => {
      throw new Error(`${(err as Error).message}\nchild output:\n${output}`)
    })
  })
  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await t?.drop()
  })

  const logLines = () =>
    output
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)

  it('an unhandled rejection is logged at error and the server keeps serving', async () => {
    child?.stdin?.write('reject\n')
    const line = await eventually(() =>
      logLines().find((l) => l.level === 'error' && /nothing handled it/.test(String(l.msg))),
    )
    expect(JSON.stringify(line.err)).toMatch(/boom: a rejection nobody handled/)
    expect((await fetch(`${url}/healthz`)).status).toBe(200)
    expect(child?.exitCode).toBeNull()
  })

  it('an uncaught exception is logged at fatal, the server stops gracefully and exits 1, every line written in order', async () => {
    const closed = once(child as ChildProcess, 'close')
    // Its stdout not read for a second, as from a slow log shipper, while the
    // stop logs more than the pipe holds: the child still has a log write
    // under way when it exits. That write's lines used to be cut off (and
    // the stop's last lines written ahead of them).
    child?.stdout?.pause()
    child?.stdin?.write('fill-at-stop\nthrow\n')
    setTimeout(() => child?.stdout?.resume(), 1800)
    const [code] = (await closed) as [number | null]
    expect(code).toBe(1)
    const lines = logLines()
    const fillers = lines.flatMap((l, i) => (/^filler \d+$/.test(String(l.msg)) ? [{ i, msg: l.msg }] : []))
    expect(fillers.map((f) => f.msg)).toEqual(Array.from({ length: 300 }, (_, n) => `filler ${n}`))
    const fatal = lines.findIndex((l) => l.level === 'fatal' && /escaped every handler/.test(String(l.msg)))
    expect(fatal, output).toBeGreaterThanOrEqual(0)
    expect(JSON.stringify(lines[fatal]?.err)).toMatch(/boom: an exception nobody caught/)
    expect(fatal).toBeLessThan(fillers[0]?.i ?? -1)
    // The ordered stop ran to its end (runner stopped, claims released, pool closed).
    const stopped = lines.findIndex((l) => l.msg === 'stopped')
    expect(stopped, output.slice(-2000)).toBeGreaterThan(fatal)
    expect(stopped).toBeGreaterThan(fillers.at(-1)?.i ?? Number.POSITIVE_INFINITY)
  })
})
