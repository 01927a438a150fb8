/**
 * The GraphQL client for scripts and the console: typed documents over HTTP
 * (POST, the GraphQL-over-HTTP media type) and subscriptions over SSE. It
 * needs only `fetch`, so it runs in Node and in the browser alike.
 */
import { print } from '@0no-co/graphql.web'
import type { TadaDocumentNode } from 'gql.tada'

/** One problem of an input, with its path (applyDefinitions answers these). */
export interface Problem {
  path: string
  message: string
}

/**
 * What the server refused, or why it could not be asked: `code` is the
 * server's `extensions.code`, or NETWORK (no answer) or HTTP (an answer that
 * is not GraphQL).
 */
export class ClientError extends Error {
  override readonly name = 'ClientError'
  constructor(
    message: string,
    readonly code: string,
    readonly problems: Problem[] = [],
  ) {
    super(message)
  }
}

export interface ClientOptions {
  /** The GraphQL endpoint, e.g. http://127.0.0.1:4000/graphql (or "/graphql" in a page). */
  url: string
  /** Sent as `Authorization: Bearer …`; none when null. */
  token: string | null
  /** Called once per UNAUTHENTICATED answer (a token revoked, a server restarted with new tokens). */
  onUnauthenticated?: () => void
  /**
   * Sent as `x-showrunner-client`: the server records a cue answered through a
   * client named `console` as `via: console` (any other answer is `via: api`).
   */
  clientName?: string
}

interface GraphQLBody {
  data?: unknown
  errors?: { message: string; extensions?: { code?: unknown; problems?: unknown } }[]
}

// biome-ignore lint/suspicious/noExplicitAny: a document's variables may be any shape.
type AnyDocument<R> = TadaDocumentNode<R, any>

function errorOf(body: GraphQLBody, opts: ClientOptions): ClientError | null {
  const first = body.errors?.[0]
  if (!first) return null
  const code = typeof first.extensions?.code === 'string' ? first.extensions.code : 'UNKNOWN'
  if (code === 'UNAUTHENTICATED') opts.onUnauthenticated?.()
  const problems = Array.isArray(first.extensions?.problems) ? (first.extensions.problems as Problem[]) : []
  return new ClientError(first.message, code, problems)
}

function headers(opts: ClientOptions, accept: string): Record<string, string> {
  const h: Record<string, string> = { 'content-type': 'application/json', accept }
  if (opts.token) h.authorization = `Bearer ${opts.token}`
  if (opts.clientName) h['x-showrunner-client'] = opts.clientName
  return h
}

export interface Client {
  /** Send a query or mutation; answers its data or throws {@link ClientError}. */
  request<R, V>(document: TadaDocumentNode<R, V>, variables?: V): Promise<R>
  /**
   * A subscription over SSE: each result as it arrives, until the server ends
   * the stream (the subscription is complete) or `signal` aborts.
   */
  subscribe<R, V>(document: TadaDocumentNode<R, V>, variables?: V, signal?: AbortSignal): AsyncIterable<R>
}

export function createClient(opts: ClientOptions): Client {
  return {
    async request<R, V>(document: TadaDocumentNode<R, V>, variables?: V): Promise<R> {
      let res: Response
      try {
        res = await fetch(opts.url, {
          method: 'POST',
          headers: headers(opts, 'application/graphql-response+json, application/json'),
          body: JSON.stringify({ query: print(document), variables }),
        })
      } catch {
        throw new ClientError(`The server at ${opts.url} does not answer. Is it running?`, 'NETWORK')
      }
      let body: GraphQLBody
      try {
        body = (await res.json()) as GraphQLBody
      } catch {
        throw new ClientError(`The server answered HTTP ${res.status} without GraphQL.`, 'HTTP')
      }
      const error = errorOf(body, opts)
      if (error) throw error
      if (body.data == null) throw new ClientError('The server answered no data.', 'HTTP')
      return body.data as R
    },
    subscribe<R, V>(document: AnyDocument<R>, variables?: V, signal?: AbortSignal): AsyncIterable<R> {
      return sse<R>(opts, print(document), variables, signal)
    },
  }
}

async function* sse<R>(
  opts: ClientOptions,
  query: string,
  variables: unknown,
  signal: AbortSignal | undefined,
): AsyncIterable<R> {
  let res: Response
  try {
    res = await fetch(opts.url, {
      method: 'POST',
      headers: headers(opts, 'text/event-stream'),
      body: JSON.stringify({ query, variables }),
      signal,
    })
  } catch {
    if (signal?.aborted) return
    throw new ClientError(`The server at ${opts.url} does not answer. Is it running?`, 'NETWORK')
  }
  if (!res.ok || !res.body || !(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    let body: GraphQLBody = {}
    try {
      body = (await res.json()) as GraphQLBody
    } catch {
      throw new ClientError(`The server answered HTTP ${res.status} instead of an event stream.`, 'HTTP')
    }
    throw errorOf(body, opts) ?? new ClientError(`The server answered HTTP ${res.status}.`, 'HTTP')
  }
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  try {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) return
      buffer += decoder.decode(value, { stream: true })
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        let event = 'message'
        const data: string[] = []
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim()
          else if (line.startsWith('data:')) data.push(line.slice(5).trimStart())
        }
        if (event === 'complete') return
        if (data.length === 0 || data.join('') === '') continue
        const body = JSON.parse(data.join('\n')) as GraphQLBody
        const error = errorOf(body, opts)
        if (error) throw error
        if (body.data != null) yield body.data as R
      }
    }
  } catch (err) {
    if (signal?.aborted) return
    if (err instanceof ClientError) throw err
    throw new ClientError('The event stream broke off; the server may have restarted.', 'NETWORK')
  } finally {
    reader.releaseLock()
    await res.body.cancel().catch(() => undefined)
  }
}
