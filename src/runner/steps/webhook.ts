/**
 * `core.webhook {url, method?, headers?, body?}`: one HTTP call per attempt (the
 * runner owns retries, backoff and the timeout behind `ctx.signal`).
 *
 * SSRF guard: the URL must pass the allow-list before anything is sent, and so
 * must every redirect target. Redirects are followed here, by hand, for exactly
 * that reason (fetch's own following would not ask). Credentials the author put
 * in headers (Authorization, Cookie) are not carried to another origin, as in
 * browsers' fetch.
 *
 * The allow-list is checked twice: on the URL, and on the address its host
 * resolves to when the connection is made (the connector's own DNS lookup, so
 * what is checked is what is dialled, also after a redirect). A hostname that
 * resolves to a loopback, link-local, private or other special-purpose address
 * (ipaddr.js's classes) is refused unless the allow-list names that IP address
 * and port itself. undici's `request` is used for that hook (a dispatcher we
 * may configure) rather than its fetch: no WHATWG Request, Headers, Response
 * and streams per call, a quarter of fetch's client CPU per webhook, which a
 * show of two thousand runs calling at the same instant feels.
 *
 * Secrets: `{{secret.NAME}}` in the url, headers and body are resolved here,
 * per attempt, from `SHOWRUNNER_SECRET_NAME`, and every resolved value is
 * scrubbed from the error or result before the runner stores it.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { Agent, buildConnector, type Dispatcher, request } from 'undici'
import { z } from 'zod'
import { SecretScope } from '../secrets.ts'
import {
  addressPortKey,
  allowedInternalAddresses,
  allowListRefusal,
  internalAddressKind,
  normaliseUrl,
  shownUrl,
} from './allowList.ts'
import { hasPlaceholder, parseParams, schemaProblems } from './params.ts'
import { type StepContext, StepFailure, type StepKind } from './types.ts'

/** Redirects followed per attempt before giving up. */
export const MAX_REDIRECTS = 5
/** How much of the response body is kept as the step's result. */
export const RESPONSE_BODY_BYTES = 2048

export const WEBHOOK_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const

/**
 * Headers an author may not set: hop-by-hop and framing headers belong to the
 * HTTP client, and the idempotency key is the runner's promise to the receiver.
 */
const FORBIDDEN_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'expect',
  'idempotency-key',
])
/** Dropped when a redirect leaves the original origin. */
const ORIGIN_BOUND_HEADERS = new Set(['authorization', 'cookie'])
/** Dropped when a redirect turns the request into a body-less GET. */
const BODY_HEADERS = new Set(['content-type', 'content-encoding', 'content-language', 'content-location'])
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

const schema = z
  .strictObject({
    url: z
      .string()
      .max(2048, 'must be at most 2048 characters')
      .superRefine((url, ctx) => {
        // With a placeholder the final URL exists only at run time; it is checked then.
        if (hasPlaceholder(url)) return
        const n = normaliseUrl(url)
        if (!n.ok)
          ctx.addIssue({ code: 'custom', message: `must be an absolute http(s) URL; this one ${n.reason}` })
      }),
    method: z.enum(WEBHOOK_METHODS, `must be one of ${WEBHOOK_METHODS.join(', ')}`).optional(),
    headers: z
      .record(z.string(), z.string('must be a string').max(8192, 'must be at most 8192 characters'))
      .superRefine((headers, ctx) => {
        const seen = new Set<string>()
        for (const [name, value] of Object.entries(headers)) {
          const lower = name.toLowerCase()
          if (!TOKEN.test(name)) {
            ctx.addIssue({ code: 'custom', path: [name], message: 'is not a valid header name' })
          } else if (lower === 'idempotency-key') {
            ctx.addIssue({
              code: 'custom',
              path: [name],
              message: 'is set by the runner (run id + step id, the same on every attempt)',
            })
          } else if (FORBIDDEN_HEADERS.has(lower)) {
            ctx.addIssue({
              code: 'custom',
              path: [name],
              message: 'is managed by the HTTP client and may not be set',
            })
          } else if (seen.has(lower)) {
            ctx.addIssue({
              code: 'custom',
              path: [name],
              message: 'is given twice (header names ignore case)',
            })
          }
          seen.add(lower)
          if (typeof value === 'string' && /[\r\n\0]/.test(value)) {
            ctx.addIssue({ code: 'custom', path: [name], message: 'must not contain line breaks or NUL' })
          }
        }
      })
      .optional(),
    body: z.unknown().optional(),
  })
  .superRefine((p, ctx) => {
    if ((p.method ?? 'POST') === 'GET' && p.body !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['body'], message: 'a GET request cannot have a body' })
    }
  })

export type WebhookParams = z.infer<typeof schema>

/** The result stored on a completed webhook step. */
export interface WebhookResult {
  status: number
  /** The first 2 KiB of the response body, as text. */
  body: string
}

/** Characters of a refused response's body quoted in the step's error. */
export const ERROR_SNIPPET_CHARS = 200

/**
 * Read at most `limit` bytes of a body as text, then let the rest go. `cut`
 * says there may have been more (the end of the body was not seen).
 */
async function readPrefix(
  body: Dispatcher.ResponseData['body'],
  limit: number,
): Promise<{ text: string; cut: boolean }> {
  const chunks: Buffer[] = []
  let size = 0
  let ended = true
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      chunks.push(chunk)
      size += chunk.byteLength
      if (size >= limit) {
        // Leaving the loop destroys the body: the rest is not read.
        ended = false
        break
      }
    }
  } finally {
    if (!body.destroyed) body.destroy()
  }
  const cut = size > limit || !ended
  const bytes = Buffer.concat(chunks).subarray(0, limit)
  // stream: true keeps a character cut at the limit out instead of garbling it.
  return { text: new TextDecoder().decode(bytes, { stream: true }), cut }
}

/** Let a body go unread (a redirect's), without failing the attempt if that goes wrong. */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.dump().catch(() => {})
}

/**
 * Why a request failed below HTTP, for a person: the socket's error code and
 * its message (`ECONNREFUSED (connect ECONNREFUSED 10.0.0.5:443)`). Webhook
 * steps and notification deliveries both say it this way.
 */
export function networkReason(err: unknown): string {
  // The socket's own error, or the one a wrapper (a connector's) carries.
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } }
  const at = e.cause?.code ? e.cause : e
  if (at.code) return `${at.code}${at.message ? ` (${at.message})` : ''}`
  return err instanceof Error ? err.message : String(err)
}

function abortReason(signal: AbortSignal): string {
  const reason = signal.reason as unknown
  if (reason instanceof Error)
    return reason.name === 'TimeoutError' ? 'timed out' : reason.message || reason.name
  return reason === undefined ? 'aborted' : String(reason)
}

/** The start of a refused response's body for the error: scrubbed of secrets first, then cut. */
function snippet(body: { text: string; cut: boolean }, secrets: SecretScope): string {
  const flat = body.text.replace(/\s+/g, ' ').trim()
  if (flat === '') return ''
  return `: ${secrets.scrubAndCut(flat, ERROR_SNIPPET_CHARS, body.cut, '…')}`
}

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void

/** Marks the error a guarded lookup refuses with; its value is the reason shown. */
const REFUSED = Symbol('webhook address refused')

/**
 * A connection pool whose DNS lookup refuses internal addresses the allow-list
 * does not name, on the port being dialled. The check is made when a
 * connection is made, on the address dialled; a kept-alive connection was
 * checked when it was opened, and a hostname that now resolves elsewhere gets
 * a new connection, checked again. A lookup does not know the port it
 * resolves for, so each port gets its own connector whose lookup does.
 */
function guardedAgent(allow: readonly string[]): Agent {
  const allowedInternal = allowedInternalAddresses(allow)
  const lookupFor =
    (port: number) =>
    (hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback) => {
      dnsLookup(hostname, { family: options.family ?? 0, all: true }, (err, addresses) => {
        if (err) return callback(err, [])
        for (const a of addresses) {
          const kind = internalAddressKind(a.address)
          if (kind && !allowedInternal.has(addressPortKey(a.address, port))) {
            const reason = `${hostname} resolves to ${a.address}, ${kind}; only an allow-list entry naming that IP address and port ${port} allows it`
            return callback(Object.assign(new Error(reason), { code: 'EACCES', [REFUSED]: reason }), [])
          }
        }
        if (options.all) return callback(null, addresses)
        const first = addresses[0]
        if (!first)
          return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), [])
        callback(null, first.address, first.family)
      })
    }
  const connectors = new Map<number, buildConnector.connector>()
  const connect: buildConnector.connector = (opts, callback) => {
    const port = opts.port ? Number(opts.port) : opts.protocol === 'https:' ? 443 : 80
    let connector = connectors.get(port)
    if (!connector) {
      connector = buildConnector({ lookup: lookupFor(port) } as buildConnector.BuildOptions)
      connectors.set(port, connector)
    }
    connector(opts, callback)
  }
  return new Agent({ connect })
}

/** The refusal a guarded lookup made, found along the error's causes; null when it was not one. */
export function refusalOf(err: unknown): string | null {
  let at: unknown = err
  for (let depth = 0; depth < 8 && at !== null && typeof at === 'object'; depth++) {
    const reason = (at as { [REFUSED]?: unknown })[REFUSED]
    if (typeof reason === 'string') return reason
    at = (at as { cause?: unknown }).cause
  }
  return null
}

/**
 * One pool per allow-list, kept for the process: a burst of webhooks to one
 * receiver reuses its connections instead of opening (and closing) one per
 * attempt. Few lists ever exist (one per process's settings, a few in tests).
 */
const agents = new Map<string, Agent>()
const MAX_AGENTS = 16

export function agentFor(allow: readonly string[]): Agent {
  const key = allow.join('\n')
  let agent = agents.get(key)
  if (agent === undefined) {
    if (agents.size >= MAX_AGENTS) {
      const [oldestKey, oldest] = agents.entries().next().value as [string, Agent]
      agents.delete(oldestKey)
      // Requests under way on it finish first; close() waits for them.
      oldest.close().catch(() => {})
    }
    agent = guardedAgent(allow)
    agents.set(key, agent)
  }
  return agent
}

/** A header's value, the first when it was sent more than once. */
function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

/**
 * Perform one attempt, following (and re-checking) redirects. What the
 * receiver answers is scrubbed of `secrets` before it is cut to size.
 */
async function send(
  ctx: StepContext<WebhookParams>,
  params: unknown,
  secrets: SecretScope,
): Promise<WebhookResult> {
  const p = parseParams(schema, params, 'core.webhook')
  return sendWith(ctx, p, agentFor(ctx.settings.webhookAllow), secrets)
}

async function sendWith(
  ctx: StepContext<WebhookParams>,
  p: WebhookParams,
  agent: Agent,
  secrets: SecretScope,
): Promise<WebhookResult> {
  const allow = ctx.settings.webhookAllow
  let url = p.url
  let method: Dispatcher.HttpMethod = p.method ?? 'POST'
  let body = p.body === undefined ? undefined : JSON.stringify(p.body)
  let origin: string | null = null
  let crossOrigin = false

  for (let redirects = 0; ; redirects++) {
    const refusal = allowListRefusal(url, allow)
    if (refusal) {
      const what = redirects === 0 ? 'webhook refused' : `webhook redirect ${redirects} refused`
      throw new StepFailure(`${what}: ${refusal}`, { retryable: false })
    }
    const target = new URL(url)
    origin ??= target.origin
    crossOrigin ||= target.origin !== origin

    // Lower-case names, so the author's User-Agent replaces ours and one
    // Content-Type check finds theirs.
    const headers: Record<string, string> = { 'user-agent': 'showrunner', accept: '*/*' }
    for (const [name, value] of Object.entries(p.headers ?? {})) {
      const lower = name.toLowerCase()
      if (crossOrigin && ORIGIN_BOUND_HEADERS.has(lower)) continue
      if (body === undefined && BODY_HEADERS.has(lower)) continue
      headers[lower] = value
    }
    headers['idempotency-key'] = ctx.idempotencyKey
    if (body !== undefined && headers['content-type'] === undefined)
      headers['content-type'] = 'application/json'

    let status: number
    let answer: { text: string; cut: boolean }
    try {
      const res = await request(target, { method, headers, body, signal: ctx.signal, dispatcher: agent })
      status = res.statusCode
      const location = firstValue(res.headers.location)
      if (status >= 300 && status < 400 && location !== undefined) {
        discard(res.body)
        if (redirects >= MAX_REDIRECTS) {
          throw new StepFailure(
            `webhook ${method} ${shownUrl(p.url)}: more than ${MAX_REDIRECTS} redirects`,
            {
              retryable: false,
            },
          )
        }
        let next: URL
        try {
          next = new URL(location, target)
        } catch {
          throw new StepFailure(
            `webhook ${method} ${shownUrl(target)}: bad redirect Location ${JSON.stringify(shownUrl(location))}`,
            { retryable: false },
          )
        }
        // Fetch's rules: 303 turns anything into GET; 301/302 turn POST into GET; 307/308 keep both.
        if (status === 303 || ((status === 301 || status === 302) && method === 'POST')) {
          method = 'GET'
          body = undefined
        }
        url = next.href
        continue
      }
      answer = await readPrefix(res.body, RESPONSE_BODY_BYTES)
    } catch (err) {
      if (err instanceof StepFailure) throw err
      const refused = refusalOf(err)
      if (refused) {
        const what = redirects === 0 ? 'webhook refused' : `webhook redirect ${redirects} refused`
        throw new StepFailure(`${what}: ${shownUrl(target)}: ${refused}`, { retryable: false })
      }
      if (ctx.signal.aborted) {
        throw new StepFailure(`webhook ${method} ${shownUrl(target)} ${abortReason(ctx.signal)}`)
      }
      throw new StepFailure(`webhook ${method} ${shownUrl(target)} failed: ${networkReason(err)}`)
    }
    if (status >= 200 && status < 300) {
      return { status, body: secrets.scrubAndCut(answer.text, RESPONSE_BODY_BYTES, answer.cut) }
    }
    const retryable = status === 408 || status === 429 || status >= 500
    throw new StepFailure(
      `webhook ${method} ${shownUrl(target)} answered HTTP ${status}${snippet(answer, secrets)}`,
      {
        retryable,
      },
    )
  }
}

export const webhookStep: StepKind<WebhookParams> = {
  kind: 'core.webhook',
  sideEffects: true,
  acceptsSecrets: true,
  validate: (params) => schemaProblems(schema, params, ['url', 'method', 'headers', 'body']),
  async execute(ctx) {
    const secrets = new SecretScope(ctx.settings.secrets ?? process.env)
    try {
      const result = await send(ctx, secrets.resolve(ctx.params), secrets)
      return { type: 'completed', result: secrets.scrubValue(result) }
    } catch (err) {
      throw secrets.scrubError(err)
    }
  },
  describe(ctx) {
    const p = ctx.params
    const method = p.method ?? 'POST'
    const names = Object.keys(p.headers ?? {})
    const parts: string[] = []
    // Header names only: their values are often secrets.
    if (names.length > 0) parts.push(`headers ${names.join(', ')}`)
    if (p.body !== undefined) {
      const json = JSON.stringify(p.body)
      parts.push(
        `body ${json.length > RESPONSE_BODY_BYTES ? `${json.slice(0, RESPONSE_BODY_BYTES)}…` : json}`,
      )
    }
    // The runner frames this ("rehearsal: would …"), so it reads as the request itself.
    return `${method} ${p.url}${parts.length > 0 ? ` with ${parts.join(' and ')}` : ''}`
  },
}
