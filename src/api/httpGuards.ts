/**
 * Yoga plugins guarding GraphQL over HTTP (and SSE, which is HTTP too):
 * - {@link useAuthGate}: no valid credential → UNAUTHENTICATED with HTTP 401,
 *   before the document is even parsed, so an anonymous caller learns nothing
 *   about the schema (not even from validation messages). The message tells a
 *   missing header from a malformed one and from a token nobody configured.
 * - {@link useCsrfPrevention}: refuse POSTs a browser would send cross-site
 *   without a CORS preflight (form and text/plain bodies), unless they carry a
 *   custom header only a script allowed by CORS could add. JSON POSTs (every
 *   real client, curl included) are preflighted by browsers and pass.
 */
import type { IncomingMessage } from 'node:http'
import { createGraphQLError, type Plugin } from 'graphql-yoga'
import type { Principal } from '../auth.ts'
import { ERROR_CODES } from '../errors.ts'
import type { Authenticator } from '../identity/authenticator.ts'
import type { Logger } from '../log.ts'
import { logRefusedAuthentication, refusedCredential, unauthenticatedError } from './authz.ts'

/** The principal the gate found for each request, read by the context factory (no second lookup). */
const gatePrincipals = new WeakMap<Request, Principal>()

export function principalOfRequest(request: Request | undefined): Principal | null {
  return (request && gatePrincipals.get(request)) ?? null
}

export function useAuthGate(authenticator: Authenticator, logger: Logger): Plugin<{ req?: IncomingMessage }> {
  return {
    async onParams({ request, params, context, setResult }) {
      const credential = request.headers.get('authorization')
      const answer = await authenticator.identify(credential)
      if ('principal' in answer) {
        gatePrincipals.set(request, answer.principal)
        return
      }
      logRefusedAuthentication(logger, {
        transport: 'http',
        credential: refusedCredential(answer.refused),
        ...(answer.refused.detail ? { detail: answer.refused.detail } : {}),
        operationName: operationNameOf(params),
        remote: (context as { req?: IncomingMessage }).req?.socket?.remoteAddress ?? null,
      })
      setResult({ errors: [unauthenticatedError(answer.refused)] })
    },
  }
}

/**
 * The operation a request names, for the log of a refused one: `operationName`
 * when sent, else the name of the document's first operation, read from the
 * first kilobyte without parsing (the request is refused before its document
 * is parsed, and parsing is the expensive part).
 */
export function operationNameOf(params: { operationName?: unknown; query?: unknown }): string | null {
  if (typeof params.operationName === 'string' && params.operationName !== '') {
    return params.operationName.slice(0, 100)
  }
  if (typeof params.query !== 'string') return null
  const m = /^(?:\s|,|#[^\n]*\n)*(?:query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]{0,99})/.exec(
    params.query.slice(0, 1024),
  )
  return m?.[1] ?? null
}

/** Content types a browser may POST cross-site without a preflight (the CORS "simple" ones). */
const SIMPLE_CONTENT_TYPES = new Set([
  '',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data',
])

/** The header that marks a simple request as deliberate. */
export const CSRF_HEADER = 'x-graphql-yoga-csrf'

export function useCsrfPrevention(requestHeaders: readonly string[] = [CSRF_HEADER]): Plugin {
  return {
    onRequestParse({ request }) {
      if (request.method !== 'POST') return
      const type = (request.headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase() ?? ''
      if (!SIMPLE_CONTENT_TYPES.has(type)) return
      if (requestHeaders.some((h) => request.headers.has(h))) return
      throw createGraphQLError(
        `Refused a POST with Content-Type "${type || 'none'}": browsers send those cross-site without asking. Send Content-Type: application/json, or add the ${requestHeaders[0]} header.`,
        { extensions: { code: ERROR_CODES.FORBIDDEN, http: { status: 403 } } },
      )
    },
  }
}
