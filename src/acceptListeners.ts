/**
 * More accepts per turn of the event loop: extra listeners on the HTTP
 * server's own listening socket, each handing what it accepts to the server.
 *
 * Why: node 20's libuv accepts one connection per listener per turn of the
 * loop. On a loaded instance (turns of 30 ms) that is about 30 new
 * connections a second, so a burst of new connections (4,000 answers at the
 * top of the hour, a load balancer's health check behind them) waited in the
 * kernel's accept queue for tens of seconds and timed out. Each extra
 * listener accepts one more per turn.
 *
 * How, without SO_REUSEPORT (node 22.12 and later only): the listening
 * socket's handle is sent to a short-lived child over IPC and straight back,
 * which gives this process another descriptor of the same socket (the
 * kernel duplicates it on the way); a plain `net.Server` listens on each.
 * The child never listens or accepts, so no connection can be lost to it,
 * and it exits once the copies are made. A raw handle is what node sends
 * for `net.Server`'s `_handle`; if any of this fails, the server keeps its
 * one listener and says so.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import type { Server as HttpServer } from 'node:http'
import { createServer, type Server as NetServer } from 'node:net'

/** The child: sends every handle it is given back, then exits when this process lets go. */
const ECHO = `
process.on('disconnect', () => process.exit(0))
process.on('message', (message, handle) => { if (message === 'copy' && handle) process.send('copy', handle) })
`

/**
 * Connections the kernel may hold for accept(). node's default (511)
 * overflows when a few thousand clients connect at once (the top of the
 * hour): the kernel drops their SYNs and they wait seconds for a retransmit,
 * or time out. Linux caps it at net.core.somaxconn.
 */
export const LISTEN_BACKLOG = 4096

/** How long the copies may take before the server goes on with one listener. */
const COPY_TIMEOUT_MS = 5000

export interface AcceptListeners {
  /** Listeners added (0 when none could be). */
  readonly count: number
  /** Stop accepting on every extra listener (the server's own is closed by its owner). */
  close(): Promise<void>
}

/** `count` descriptors of the same listening socket, each copied through a child; throws when that fails. */
async function copiesOf(handle: object, count: number): Promise<object[]> {
  const child = spawn(process.execPath, ['-e', ECHO], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] })
  const copies: object[] = []
  // A child that cannot start, or whose channel breaks, ends the copying; never the process.
  const failed = new Promise<never>((_, reject) => {
    child.on('error', reject)
    child.once('exit', () => reject(new Error('the copying child exited early')))
  })
  failed.catch(() => {})
  const timer = setTimeout(() => child.kill('SIGKILL'), COPY_TIMEOUT_MS)
  try {
    for (let i = 0; i < count; i++) {
      const back = once(child, 'message') as Promise<[string, object | undefined]>
      back.catch(() => {})
      child.send('copy', handle as Parameters<typeof child.send>[1])
      const [, copy] = await Promise.race([back, failed])
      if (!copy) throw new Error('the copying child sent no handle back')
      copies.push(copy)
    }
    return copies
  } finally {
    clearTimeout(timer)
    if (child.connected) child.disconnect()
  }
}

/**
 * Add `extra` listeners to `httpServer`, which must be listening on TCP with
 * `backlog`.
 * Answers how many were added; a failure is reported through `onFailure`
 * and leaves the server as it was.
 */
export async function addAcceptListeners(
  httpServer: HttpServer,
  extra: number,
  backlog: number,
  onFailure: (err: unknown) => void,
): Promise<AcceptListeners> {
  const listeners: NetServer[] = []
  const close = async () => {
    await Promise.all(
      listeners.map(
        (l) => new Promise<void>((resolve) => (l.listening ? l.close(() => resolve()) : resolve())),
      ),
    )
  }
  const handle = (httpServer as unknown as { _handle?: object | null })._handle
  if (extra <= 0 || !handle) return { count: 0, close }
  try {
    for (const copy of await copiesOf(handle, extra)) {
      // Sockets made as node's http server makes its own (half-open allowed, no
      // Nagle), then handed to it as its own listener's are.
      const listener = createServer({ allowHalfOpen: true, noDelay: true }, (socket) =>
        httpServer.emit('connection', socket),
      )
      await new Promise<void>((resolve, reject) => {
        listener.once('error', reject)
        // The backlog again: listen(2) on a copy sets the socket's accept queue.
        listener.listen(copy as Parameters<NetServer['listen']>[0], backlog, () => {
          listener.off('error', reject)
          resolve()
        })
      })
      // Later errors are reported; one while listening is reported once, below.
      listener.on('error', onFailure)
      listeners.push(listener)
    }
  } catch (err) {
    onFailure(err)
    await close()
    listeners.length = 0
  }
  return { count: listeners.length, close }
}

export interface ListenOptions {
  port: number
  host: string
  /** Listeners in all, node's own included (HTTP_ACCEPT_LISTENERS). */
  listeners: number
  /** Told when the extra listeners could not be added (the server still serves). */
  onListenerFailure: (err: unknown) => void
}

/** Listen on `port` with the large accept queue, then add the extra listeners. */
export async function listenHttp(httpServer: HttpServer, opts: ListenOptions): Promise<AcceptListeners> {
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err)
    httpServer.once('error', onError)
    httpServer.listen({ port: opts.port, host: opts.host, backlog: LISTEN_BACKLOG }, () => {
      httpServer.off('error', onError)
      resolve()
    })
  })
  return addAcceptListeners(httpServer, opts.listeners - 1, LISTEN_BACKLOG, opts.onListenerFailure)
}
