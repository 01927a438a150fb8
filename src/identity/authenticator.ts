/**
 * "Who is this?" for every transport: one function from an Authorization
 * value to a principal, trying in turn the bootstrap tokens (constant time,
 * from the environment), API keys (the database, cached) and, when an issuer
 * is configured, OIDC tokens (JWTs signed by the issuer's keys).
 *
 * It also answers how long a principal stays valid ({@link Authenticator.watch}):
 * an open WebSocket or SSE stream ends when its API key is revoked anywhere or
 * expires, or when its JWT expires.
 */
import { authenticate, type Principal, type TokenEntry } from '../auth.ts'
import { type ApiKeyring, looksLikeApiKey } from './keyring.ts'

/** Why a credential was refused; each has its own message (src/api/authz.ts). */
export type RefusalReason = 'missing' | 'malformed' | 'invalid' | 'revoked' | 'expired' | 'oidc'

export interface Refusal {
  reason: RefusalReason
  /** For 'oidc': what was wrong with the token, in words safe to show its holder. */
  detail?: string
}

export type Identified = { principal: Principal } | { refused: Refusal }

/** Verifies OIDC tokens (src/identity/oidc.ts). */
export interface OidcVerifier {
  verify(jwt: string): Promise<Principal | { detail: string }>
}

const BEARER = /^\s*bearer\s+(\S+)\s*$/i
/** Three base64url parts: the shape of a JWS compact serialisation. */
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/

export interface AuthenticatorOptions {
  tokens: readonly TokenEntry[]
  keyring: ApiKeyring
  oidc?: OidcVerifier | null
}

export class Authenticator {
  constructor(private readonly opts: AuthenticatorOptions) {}

  get keyring(): ApiKeyring {
    return this.opts.keyring
  }

  async identify(header: string | null | undefined): Promise<Identified> {
    if (typeof header !== 'string' || header.trim() === '') return { refused: { reason: 'missing' } }
    const m = BEARER.exec(header)
    if (!m?.[1]) return { refused: { reason: 'malformed' } }
    const credential = m[1]
    // Bootstrap tokens first, always, so their comparison stays constant-time
    // over every configured token whatever the credential looks like.
    const fromToken = authenticate(header, this.opts.tokens)
    if (fromToken) return { principal: fromToken }
    if (looksLikeApiKey(credential)) {
      const answer = await this.opts.keyring.authenticate(credential)
      if (typeof answer === 'string') {
        return { refused: { reason: answer === 'unknown' ? 'invalid' : answer } }
      }
      return { principal: answer }
    }
    if (this.opts.oidc && JWT_SHAPE.test(credential)) {
      const answer = await this.opts.oidc.verify(credential)
      if ('detail' in answer) return { refused: { reason: 'oidc', detail: answer.detail } }
      return { principal: answer }
    }
    return { refused: { reason: 'invalid' } }
  }

  /**
   * Call `onEnd` once when `principal` stops being valid: its API key revoked
   * (on any instance, seen within one poll) or expired, its JWT expired.
   * Bootstrap tokens never end. Answers the function that stops watching.
   */
  watch(principal: Principal, onEnd: (why: 'revoked' | 'expired') => void): () => void {
    if (principal.keyId !== undefined) {
      return this.opts.keyring.onRefused(principal.keyId, principal.expiresAt ?? null, onEnd)
    }
    if (principal.expiresAt) {
      const ms = principal.expiresAt.getTime() - Date.now()
      if (ms >= 2 ** 31 - 1) return () => {}
      const timer = setTimeout(() => onEnd('expired'), Math.max(0, ms + 1))
      timer.unref?.()
      return () => clearTimeout(timer)
    }
    return () => {}
  }
}
