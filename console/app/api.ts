/**
 * The console's only way to the server: GraphQL over HTTP (queries and
 * mutations) and graphql-ws (subscriptions), both with the signed-in token.
 */
import { print } from '@0no-co/graphql.web'
import { type Client, createClient as createWsClient } from 'graphql-ws'
import type { TadaDocumentNode } from '../../src/client/graphql.ts'
import { ClientError, createClient } from '../../src/client/http.ts'

/** What the server refused (its `extensions.code`), or NETWORK when it could not be asked. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
    /** Each problem of an input with its path, where the server names them (applyDefinitions). */
    readonly problems: { path: string; message: string }[] = [],
  ) {
    super(message)
  }
}

const TOKEN_KEY = 'showrunner.token'
/** Who the token was at sign-in (role and actor; not a secret), so a reload renders at once. */
const VIEWER_KEY = 'showrunner.viewer'

/** The token lives in sessionStorage: this tab only, gone when it closes. */
export function storedToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY)
  } catch {
    return null
  }
}

export function storedViewer<T>(): T | null {
  try {
    const text = sessionStorage.getItem(VIEWER_KEY)
    return text ? (JSON.parse(text) as T) : null
  } catch {
    return null
  }
}

export function storeToken(token: string | null, viewer?: unknown): void {
  try {
    if (token === null) {
      sessionStorage.removeItem(TOKEN_KEY)
      sessionStorage.removeItem(VIEWER_KEY)
    } else {
      sessionStorage.setItem(TOKEN_KEY, token)
      sessionStorage.setItem(VIEWER_KEY, JSON.stringify(viewer ?? null))
    }
  } catch {
    // Storage refused (private mode): the token then lasts as long as the page.
  }
}

let unauthenticatedListener: () => void = () => {}
/** Called when the server refuses the token (revoked, server restarted with new tokens). */
export function onUnauthenticated(fn: () => void): void {
  unauthenticatedListener = fn
}

/** Send a typed document with the signed-in token; its answer's type comes from the document. */
export async function gql<R, V>(token: string, document: TadaDocumentNode<R, V>, variables?: V): Promise<R> {
  const client = createClient({
    url: '/graphql',
    token,
    clientName: 'console',
    onUnauthenticated: () => unauthenticatedListener(),
  })
  try {
    return await client.request(document, variables)
  } catch (err) {
    if (err instanceof ClientError)
      throw new ApiError(err.message, err.code === 'HTTP' ? 'NETWORK' : err.code, err.problems)
    throw err
  }
}

interface RunPageOf<T> {
  runPage: { nodes: T[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } }
}

/**
 * Every node of a `runPage` query, page after page (variables `first` and
 * `after`), up to `max`; `more` tells whether the server had still more.
 */
export async function allPages<T, V extends { first: number; after?: string | null }>(
  token: string,
  document: TadaDocumentNode<RunPageOf<T>, V>,
  pageSize: number,
  max: number,
  /** The document's other variables, the same for every page. */
  extra?: Omit<V, 'first' | 'after'>,
): Promise<{ nodes: T[]; more: boolean }> {
  const nodes: T[] = []
  let after: string | null = null
  for (;;) {
    const data: RunPageOf<T> = await gql(token, document, {
      ...extra,
      first: Math.min(pageSize, max - nodes.length),
      after,
    } as V)
    nodes.push(...data.runPage.nodes)
    const { hasNextPage, endCursor } = data.runPage.pageInfo
    if (!hasNextPage || !endCursor) return { nodes, more: false }
    if (nodes.length >= max) return { nodes, more: true }
    after = endCursor
  }
}

let wsClient: { token: string; client: Client } | null = null
let socketUp = false
const socketListeners = new Set<(up: boolean) => void>()

/** True while the subscription socket is connected (so pushed data is current). */
export function liveSocketUp(): boolean {
  return socketUp
}

/** Hear when the subscription socket connects or drops; answers the function that stops listening. */
export function onSocketChange(fn: (up: boolean) => void): () => void {
  socketListeners.add(fn)
  return () => socketListeners.delete(fn)
}

function setSocketUp(up: boolean): void {
  if (up === socketUp) return
  socketUp = up
  for (const fn of socketListeners) fn(up)
}

function subscriptionClient(token: string): Client {
  if (wsClient?.token === token) return wsClient.client
  wsClient?.client.dispose()
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql`
  const client = createWsClient({
    url,
    connectionParams: { authorization: `Bearer ${token}` },
    lazy: true,
    retryAttempts: Number.POSITIVE_INFINITY,
    // 4401: the credential was refused, revoked or expired; retrying with it cannot help.
    shouldRetry: (event) => (event as CloseEvent | undefined)?.code !== 4401,
    on: {
      connected: () => setSocketUp(true),
      closed: (event) => {
        setSocketUp(false)
        if ((event as CloseEvent | undefined)?.code === 4401) unauthenticatedListener()
      },
    },
  })
  wsClient = { token, client }
  return client
}

export function closeSubscriptions(): void {
  wsClient?.client.dispose()
  wsClient = null
  setSocketUp(false)
}

export interface SubscriptionHandlers<T> {
  next(data: T): void
  /** The subscription cannot work (e.g. the server does not offer it); the caller falls back to polling. */
  unsupported(error: ApiError): void
}

/** Subscribe over graphql-ws; answers the function that ends the subscription. */
export function subscribe<T, V>(
  token: string,
  document: TadaDocumentNode<T, V>,
  variables: V | undefined,
  handlers: SubscriptionHandlers<T>,
): () => void {
  return subscriptionClient(token).subscribe<T>(
    { query: print(document), variables: variables as Record<string, unknown> | undefined },
    {
      next: (result) => {
        const first = result.errors?.[0]
        if (first) {
          handlers.unsupported(new ApiError(first.message, String(first.extensions?.code ?? '')))
          return
        }
        if (result.data) handlers.next(result.data as T)
      },
      error: (err) => {
        const list = Array.isArray(err) ? (err as { message: string }[]) : []
        handlers.unsupported(
          new ApiError(list[0]?.message ?? 'the live connection failed', 'SUBSCRIPTION_FAILED'),
        )
      },
      complete: () => {},
    },
  )
}

/** The poll interval the server suggests for what no subscription pushes. */
export function pollMs(): number {
  const meta = document.querySelector('meta[name="showrunner-poll-ms"]')
  const n = Number(meta?.getAttribute('content'))
  return Number.isFinite(n) && n >= 100 ? n : 1000
}
