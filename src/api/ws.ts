/**
 * GraphQL over WebSocket (the `graphql-ws` protocol) on the HTTP server's port
 * and path, executing through yoga's envelop so validation limits, error
 * masking and the per-field role checks are the same as over HTTP.
 *
 * Authentication happens once, in `onConnect`, from
 * `connectionParams.authorization` ("Bearer <token>"): without a valid token
 * the socket is closed with 4401 before any operation is accepted.
 */
import type { IncomingMessage, Server } from 'node:http'
import type { Socket } from 'node:net'
import { type ExecutionArgs, GraphQLError } from 'graphql'
import { CloseCode } from 'graphql-ws'
import { useServer } from 'graphql-ws/use/ws'
import type { YogaServerInstance } from 'graphql-yoga'
import { type WebSocket, WebSocketServer } from 'ws'
import type { Principal } from '../auth.ts'
import { ERROR_CODES } from '../errors.ts'
import type { Authenticator, Refusal } from '../identity/authenticator.ts'
import type { Logger } from '../log.ts'
import { ADMISSION_BUSY_MESSAGE, type Admission, admitOperation } from './admission.ts'
import { logRefusedAuthentication, refusedCredential, unauthenticatedError } from './authz.ts'
import type { ApiContext } from './context.ts'
import { API_CODES } from './errors.ts'

/** Where the WebSocket path puts the principal in yoga's initial context (a symbol: no client can set it). */
export const WS_PRINCIPAL = Symbol('showrunner.wsPrincipal')

type Extra = { principal?: Principal }

/** A query or mutation refused for want of a slot: BUSY, with when to ask again (as HTTP's Retry-After). */
function busyResult(retryAfterSeconds: number): { errors: GraphQLError[] } {
  return {
    errors: [
      new GraphQLError(ADMISSION_BUSY_MESSAGE, {
        extensions: { code: ERROR_CODES.BUSY, retryAfterSeconds },
      }),
    ],
  }
}

interface EnvelopedRoot {
  execute: (args: ExecutionArgs) => unknown
  subscribe: (args: ExecutionArgs) => unknown
  /** The operation's socket: a query waiting for a slot leaves the queue when it closes. */
  socket: WebSocket
}

export interface WsTransport {
  readonly server: WebSocketServer
  /** Close every socket with 1001 "Going away" and stop accepting; terminates stragglers after `graceMs`. */
  close(graceMs?: number): Promise<void>
}

/**
 * The credential a WebSocket client sent. The documented form is
 * `connectionParams.authorization: "Bearer TOKEN"`; clients in the wild also
 * send `Authorization`, a bare token, or the header on the upgrade request
 * (Node clients can set it), so each of those is read too. The token itself is
 * still checked by `authenticate` like any HTTP request's.
 */
export function wsAuthorization(
  params: Readonly<Record<string, unknown>> | undefined,
  request: { headers: IncomingMessage['headers'] },
): string | null {
  const raw = params?.authorization ?? params?.Authorization ?? request.headers.authorization
  if (typeof raw !== 'string' || raw.trim() === '') return null
  return /^\s*bearer\s/i.test(raw) ? raw : `Bearer ${raw.trim()}`
}

/** The close reason for a refused connection: says which of the refusals it was, never the credential. */
function closeReason(refusal: Refusal): string {
  switch (refusal.reason) {
    case 'missing':
      return 'Unauthorized: connectionParams.authorization must be "Bearer <token>"'
    case 'revoked':
      return 'Unauthorized: this API key was revoked'
    case 'expired':
      return 'Unauthorized: the credential expired'
    case 'oidc':
      return `Unauthorized: identity token refused (${refusal.detail ?? 'not valid'})`.slice(0, 123)
    default:
      return 'Unauthorized: invalid token (not one this server accepts)'
  }
}

/**
 * Messages one socket sends in the same turn of the event loop go out in one
 * write. A change reaches every subscription on a socket in the same turn (a
 * poll hands it to all, and equal subscriptions share one execution), so a
 * socket holding 100 subscriptions wrote 100 frames, one syscall each; now the
 * socket is corked at its first message of a turn and uncorked once the turn
 * has run (setImmediate), one `writev` for all of them. graphql-ws waits for
 * each message's write before it takes the subscription's next one, so it
 * also means one message per subscription per turn: a subscriber's backlog
 * drains between the loop's other work instead of in one long run of
 * microtasks ahead of it (the runner's I/O, /healthz).
 */
function batchWrites(socket: WebSocket): void {
  const send = socket.send.bind(socket) as (...args: unknown[]) => void
  let corked = false
  socket.send = ((...args: unknown[]) => {
    const raw = (socket as unknown as { _socket?: Socket })._socket
    if (!corked && raw && !raw.destroyed) {
      corked = true
      raw.cork()
      setImmediate(() => {
        corked = false
        raw.uncork()
      })
    }
    send(...args)
  }) as WebSocket['send']
}

export function attachGraphqlWs(opts: {
  httpServer: Server
  path: string
  // biome-ignore lint/suspicious/noExplicitAny: yoga's server context is whatever node:http gives it
  yoga: YogaServerInstance<any, ApiContext>
  authenticator: Authenticator
  maxPayloadBytes: number
  logger: Logger
  /** Operations (subscriptions, and queries still running) one socket may hold at once. @default 100 */
  maxOperations?: number
  /** Milliseconds a socket has to send connection_init; then it is closed with 4408. @default 3000 */
  initTimeoutMs?: number
  /**
   * The instance's GraphQL slots (admission.ts), shared with HTTP: a query or
   * mutation waits for one or is answered BUSY. Subscriptions take none (their
   * own caps bound them, as an SSE stream's do). None: no admission.
   */
  admission?: Admission
}): WsTransport {
  const maxOperations = opts.maxOperations ?? 100
  const wss = new WebSocketServer({
    server: opts.httpServer,
    path: opts.path,
    maxPayload: opts.maxPayloadBytes,
  })
  /** Per open socket, how to take its queries still waiting for a slot out of the queue. */
  const waitingOn = new WeakMap<WebSocket, Set<() => void>>()
  wss.on('connection', (socket) => {
    batchWrites(socket)
    const waiting = new Set<() => void>()
    waitingOn.set(socket, waiting)
    socket.once('close', () => {
      for (const leave of waiting) leave()
      waitingOn.delete(socket)
    })
  })
  const disposable = useServer<Record<string, unknown> | undefined, Extra>(
    {
      // Never put internal error text into close reasons.
      isProd: true,
      // An idle socket that never says who it is holds memory and a file descriptor for nothing.
      connectionInitWaitTimeout: opts.initTimeoutMs ?? 3000,
      async onConnect(ctx) {
        const credential = wsAuthorization(ctx.connectionParams, ctx.extra.request)
        let answer: Awaited<ReturnType<Authenticator['identify']>>
        try {
          answer = await opts.authenticator.identify(credential)
        } catch (err) {
          // An API key could not be looked up (the database is away): not the client's fault.
          // 1013 "try again later" lets clients reconnect, unlike the final 4401.
          opts.logger.warn({ err }, 'could not check a WebSocket credential; asked the client to retry')
          ctx.extra.socket.close(1013, 'Try again later: the credential could not be checked')
          return false
        }
        if (!('principal' in answer)) {
          logRefusedAuthentication(opts.logger, {
            transport: 'websocket',
            credential: refusedCredential(answer.refused),
            ...(answer.refused.detail ? { detail: answer.refused.detail } : {}),
            operationName: null,
            remote: ctx.extra.request.socket?.remoteAddress ?? null,
          })
          // 4401 says "your credentials", which clients treat as final (no reconnect loop).
          // A close reason holds at most 123 bytes.
          ctx.extra.socket.close(CloseCode.Unauthorized, closeReason(answer.refused))
          return false
        }
        const principal = answer.principal
        ctx.extra.principal = principal
        // A revoked or expired credential ends the socket, whatever it has open.
        const socket = ctx.extra.socket
        const unwatch = opts.authenticator.watch(principal, (why) => {
          opts.logger.info(
            { actor: principal.name, why },
            'closed a WebSocket: its credential was revoked or expired',
          )
          socket.close(
            CloseCode.Unauthorized,
            why === 'revoked'
              ? 'Unauthorized: this API key was revoked'
              : 'Unauthorized: the credential expired',
          )
        })
        socket.once('close', unwatch)
        return true
      },
      async onSubscribe(ctx, _id, payload) {
        const principal = ctx.extra.principal
        if (!principal) return [unauthenticatedError()]
        // graphql-ws has already entered this operation in ctx.subscriptions.
        const inFlight = Object.keys(ctx.subscriptions).length
        if (inFlight > maxOperations) {
          opts.logger.warn(
            { actor: principal.name, operationName: payload.operationName ?? null, limit: maxOperations },
            'refused a WebSocket operation: too many on one socket',
          )
          return [
            new GraphQLError(
              `Too many operations on this WebSocket: at most ${maxOperations} may be open at once (WS_MAX_SUBSCRIPTIONS). Complete some, or open another socket.`,
              { extensions: { code: API_CODES.TOO_MANY_OPERATIONS } },
            ),
          ]
        }
        const enveloped = opts.yoga.getEnveloped({
          req: ctx.extra.request as IncomingMessage,
          socket: ctx.extra.socket,
          params: payload,
          [WS_PRINCIPAL]: principal,
        })
        let document: ReturnType<typeof enveloped.parse>
        try {
          document = enveloped.parse(payload.query)
        } catch (err) {
          return [err as GraphQLError]
        }
        const errors = enveloped.validate(enveloped.schema, document)
        if (errors.length > 0) return errors
        const root: EnvelopedRoot = {
          execute: enveloped.execute,
          subscribe: enveloped.subscribe,
          socket: ctx.extra.socket,
        }
        return {
          schema: enveloped.schema,
          document,
          operationName: payload.operationName,
          variableValues: payload.variables,
          contextValue: await enveloped.contextFactory(),
          rootValue: root,
        }
      },
      execute: (args) => {
        const root = args.rootValue as EnvelopedRoot
        if (!opts.admission) return root.execute(args) as never
        const { answer, leave } = admitOperation(opts.admission, () => root.execute(args), busyResult)
        // One close listener per socket, not one per operation (a hundred would warn).
        const waiting = waitingOn.get(root.socket)
        if (waiting === undefined) return answer as never
        waiting.add(leave)
        return answer.finally(() => waiting.delete(leave)) as never
      },
      subscribe: (args) => (args.rootValue as EnvelopedRoot).subscribe(args) as never,
    },
    wss,
  )
  return {
    server: wss,
    async close(graceMs = 2000) {
      const clients = [...wss.clients]
      await disposable.dispose()
      const deadline = Date.now() + graceMs
      while (clients.some((c) => c.readyState !== c.CLOSED) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      for (const c of clients) if (c.readyState !== c.CLOSED) c.terminate()
      opts.logger.debug({ sockets: clients.length }, 'websocket transport closed')
    },
  }
}
