/** What the sign-in form accepts, and how it says why a credential was refused. */
import { ApiError } from './api.ts'

/**
 * The token in what a person pasted: the line the server prints at start
 * (`Authorization: Bearer <token>`), `Bearer <token>`, or the token alone,
 * with any surrounding whitespace or quotes.
 */
export function normaliseToken(pasted: string): string {
  let t = pasted
    .trim()
    .replace(/^["'`]|["'`]$/g, '')
    .trim()
  t = t.replace(/^authorization\s*:\s*/i, '')
  t = t.replace(/^bearer\s+/i, '')
  return t.trim()
}

/**
 * Why the server refused a credential, in the words of the sign-in form: a
 * token it does not know, or one it knows that expired or was revoked (the
 * server's UNAUTHENTICATED message says which).
 */
export function refusalText(err: unknown): string {
  if (!(err instanceof ApiError)) return err instanceof Error ? err.message : String(err)
  if (err.code !== 'UNAUTHENTICATED') return err.message
  const m = err.message
  if (/revoked/i.test(m))
    return 'Expired / revoked: this server knows that key, but it was revoked. Ask an admin for a new key.'
  if (/expired/i.test(m))
    return 'Expired / revoked: this server knows that credential, but it has expired. Ask an admin for a new key, or sign in again.'
  if (/not one this server accepts/i.test(m))
    return 'Not a token this server knows: check that it is an API key (sr_live_…), a token from SHOWRUNNER_TOKENS, or the admin token the server printed at start.'
  return m
}
