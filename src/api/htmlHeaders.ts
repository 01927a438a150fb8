/**
 * The headers every HTML answer carries (the console's page, GraphiQL): a
 * Content-Security-Policy that refuses framing (`frame-ancestors 'none'`)
 * and lets the page talk to its own origin only, `X-Frame-Options: DENY` for
 * browsers that predate frame-ancestors, and `X-Content-Type-Options: nosniff`.
 *
 * `connect-src` names this host's WebSocket URLs next to `'self'` (browsers
 * that follow CSP Level 2 do not count `ws:` as `'self'`), built from the
 * request's Host header when it is a plain host[:port]; a Host that is not
 * leaves `'self'` alone, never a wildcard. Both `ws://` and `wss://` are named
 * for that host: behind a proxy that ends TLS the page is https while this
 * server sees plain http.
 */

import type { Plugin } from 'graphql-yoga'

/** host, host:port, [v6]:port; nothing that could end a directive. */
const PLAIN_HOST = /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/

/** `'self'` plus `ws://host wss://host` for this request's own host. */
export function connectSrc(host: string | undefined): string {
  if (!host || !PLAIN_HOST.test(host)) return "'self'"
  return `'self' ws://${host} wss://${host}`
}

export interface HtmlPolicy {
  /** Directives beyond the defaults, e.g. GraphiQL's workers and inline styles. */
  extra?: string
  /** The request's Host header. */
  host: string | undefined
}

export function htmlSecurityHeaders(policy: HtmlPolicy): Record<string, string> {
  const csp = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src ${connectSrc(policy.host)}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ]
  const policyText = policy.extra ? mergeDirectives(csp, policy.extra) : csp.join('; ')
  return {
    'content-security-policy': policyText,
    'x-frame-options': 'DENY',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  }
}

/** `base` with each directive in `extra` replacing the one of the same name (or added). */
function mergeDirectives(base: string[], extra: string): string {
  const byName = new Map(base.map((d) => [d.split(' ')[0]!, d]))
  for (const d of extra.split(';').map((x) => x.trim())) {
    if (d !== '') byName.set(d.split(' ')[0]!, d)
  }
  return [...byName.values()].join('; ')
}

/**
 * GraphiQL's page: Monaco adds style elements and runs its language services
 * in workers started from this server's scripts.
 */
const GRAPHIQL_DIRECTIVES =
  "style-src 'self' 'unsafe-inline'; font-src 'self' data:; worker-src 'self' blob:; img-src 'self' data:"

/** A yoga plugin: every HTML answer of yoga (GraphiQL) gets {@link htmlSecurityHeaders}. */
export function useHtmlSecurityHeaders(): Plugin {
  return {
    onResponse({ request, response }) {
      if (!/^text\/html\b/i.test(response.headers.get('content-type') ?? '')) return
      const headers = htmlSecurityHeaders({
        host: request.headers.get('host') ?? undefined,
        extra: GRAPHIQL_DIRECTIVES,
      })
      for (const [name, value] of Object.entries(headers)) response.headers.set(name, value)
    },
  }
}
