/**
 * Extra listeners on the HTTP port (src/acceptListeners.ts): node 20 accepts
 * one connection per listener per turn of the event loop, so a loaded loop
 * took new connections about one per turn. With more listeners on copies of
 * the same socket, a turn accepts more, every request is answered on its own
 * connection, the accept queue keeps its size, and closing stops them all.
 *
 * The loop is kept busy (20 ms a turn) while a client process opens 200
 * connections at once; each turn's accepted connections are counted.
 */
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { addAcceptListeners, LISTEN_BACKLOG, listenHttp } from '../src/acceptListeners.ts'
import { ConfigError, loadConfig } from '../src/config.ts'

const CLIENTS = 200

/** A client process: CLIENTS GETs at once, each on a connection of its own; prints what each got. */
const CLIENT = `
const http = require('node:http')
const port = Number(process.argv[1])
const one = (i) => new Promise((resolve) => {
  http.get({ host: '127.0.0.1', port, path: '/n/' + i, agent: false }, (res) => {
    let body = ''
    res.setEncoding('utf8')
    res.on('data', (d) => { body += d })
    res.on('end', () => resolve(body === 'answer ' + i ? 'ok' : 'wrong: ' + body))
  }).on('error', (err) => resolve('error: ' + err.code))
})
Promise.all(Array.from({ length: ${CLIENTS} }, (_, i) => one(i))).then((r) => process.stdout.write(JSON.stringify(r)))
`

let servers: Server[] = []
afterEach(async () => {
  for (const s of servers) s.closeAllConnections()
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))))
  servers = []
})

function answeringServer(): Server {
  const server = createServer((req, res) => res.end(`answer ${req.url?.slice('/n/'.length)}`))
  servers.push(server)
  return server
}

/** Keep the loop busy while the clients connect; answer the most connections accepted in one turn. */
async function mostAcceptedInOneTurn(server: Server): Promise<{ most: number; answers: string[] }> {
  let turn = 0
  let busy = true
  const perTurn = new Map<number, number>()
  server.on('connection', () => perTurn.set(turn, (perTurn.get(turn) ?? 0) + 1))
  const work = () => {
    if (!busy) return
    turn++
    const t0 = performance.now()
    while (performance.now() - t0 < 20) {}
    setImmediate(work)
  }
  const port = (server.address() as AddressInfo).port
  const client = spawn(process.execPath, ['-e', CLIENT, String(port)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let out = ''
  client.stdout.on('data', (d: Buffer) => {
    out += d.toString()
  })
  const exited = once(client, 'exit')
  work()
  await exited
  busy = false
  return { most: Math.max(...perTurn.values()), answers: JSON.parse(out) as string[] }
}

/** Listen on a free loopback port with `listeners` listeners in all. */
function listenOn(server: Server, listeners: number, onListenerFailure: (err: unknown) => void = () => {}) {
  return listenHttp(server, { port: 0, host: '127.0.0.1', listeners, onListenerFailure })
}

function backlogOf(port: number): number {
  const line = execFileSync('ss', ['-ltnH', `sport = :${port}`])
    .toString()
    .trim()
  return Number(line.split(/\s+/)[2])
}

describe('extra listeners on the HTTP port', () => {
  it("node's own listener accepts one connection per turn of a busy loop", async () => {
    const server = answeringServer()
    const added = await listenOn(server, 1)
    expect(added.count).toBe(0)
    const { most, answers } = await mostAcceptedInOneTurn(server)
    expect(answers.filter((a) => a === 'ok')).toHaveLength(CLIENTS)
    expect(most).toBe(1)
  })

  it('with 8 listeners a busy turn accepts several, every request answered on its own connection', async () => {
    const server = answeringServer()
    const failures: unknown[] = []
    const added = await listenOn(server, 8, (err) => failures.push(err))
    expect(failures).toEqual([])
    expect(added.count).toBe(7)
    // listen(2) on each copy keeps the large accept queue.
    expect(backlogOf((server.address() as AddressInfo).port)).toBe(LISTEN_BACKLOG)
    const { most, answers } = await mostAcceptedInOneTurn(server)
    expect(answers.filter((a) => a !== 'ok')).toEqual([])
    expect(most).toBeGreaterThan(1)
    expect(most).toBeLessThanOrEqual(8)
    await added.close()
  })

  it('once closed with the server, nothing accepts on the port', async () => {
    const server = answeringServer()
    const added = await listenOn(server, 4)
    const port = (server.address() as AddressInfo).port
    expect(await (await fetch(`http://127.0.0.1:${port}/n/1`)).text()).toBe('answer 1')
    await added.close()
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
    servers = []
    await expect(fetch(`http://127.0.0.1:${port}/n/2`)).rejects.toThrow()
  })

  it('a server that is not listening gets no listeners, and nothing fails', async () => {
    const failures: unknown[] = []
    const added = await addAcceptListeners(answeringServer(), 3, LISTEN_BACKLOG, (err) => failures.push(err))
    expect(added.count).toBe(0)
    expect(failures).toEqual([])
    await added.close()
  })

  it('HTTP_ACCEPT_LISTENERS is 8 by default, a whole number from 1 to 64', () => {
    expect(loadConfig({}).httpAcceptListeners).toBe(8)
    expect(loadConfig({ HTTP_ACCEPT_LISTENERS: '1' }).httpAcceptListeners).toBe(1)
    expect(() => loadConfig({ HTTP_ACCEPT_LISTENERS: '0' })).toThrow(ConfigError)
    expect(() => loadConfig({ HTTP_ACCEPT_LISTENERS: 'many' })).toThrow(
      "HTTP_ACCEPT_LISTENERS must be a whole number of listeners from 1 to 64 (got 'many')",
    )
  })
})
