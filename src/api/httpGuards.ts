/**
 * Yoga plugins guarding GraphQL over HTTP (and SSE, which is HTTP too):
 * - {@link useAuthGate}: no valid bearer token → UNAUTHENTICATED with HTTP 401,
 *   before the document is even parsed, so an anonymous caller learns nothing
 *   about the schema (not even from validation messages). The message tells a
 *   missing header from a malformed one and from a token nobody configured.
 * - {@link useCsrfPrevention}: refuse POSTs a browser would send cross-site
 *   without a CORS preflight (form and text/plain bodies), unless they carry a
 *   custom header only a script allowed by CORS could add. JSON POSTs (every
 *   real client, curl included) are preflighted by browsers and pass.
 */
import { createGraphQLError, type Plugin } from 'graphql-yoga'
import { authenticate, type TokenEntry } from '../auth.ts'
import { ERROR_CODES } from '../errors.ts'
import { unauthenticatedError, unauthenticatedReason } from './authz.ts'

export function useAuthGate(tokens: readonly TokenEntry[]): Plugin {
  return {
    onParams({ request, setResult }) {
      const header = request.headers.get('authorization')
      if (authenticate(header, tokens) === null) {
        setResult({ errors: [unauthenticatedError(unauthenticatedReason(header))] })
      }
    },
  }
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
