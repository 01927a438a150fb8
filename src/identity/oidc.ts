/**
 * Bearer JWTs from an OIDC issuer (jose). The issuer's signing keys come from
 * OIDC_JWKS_URL or, without it, from the issuer's discovery document; jose's
 * remote key set caches them and fetches again when a token names a key id it
 * does not know (a rotation), at most once per cooldown so a flood of forged
 * key ids cannot turn into a flood of fetches.
 *
 * A token is accepted only when: signed with an asymmetric algorithm by a key
 * of that set (so `alg: none` and HS256 "signed" with the public key are
 * refused before anything else), `iss` is the issuer, `aud` includes the
 * audience, `exp` is present and not past and `nbf` not ahead (30 s of clock
 * skew either way), and at least one of its teams is in OIDC_ROLE_MAP.
 */
import {
  createRemoteJWKSet,
  type JWTPayload,
  type JWTVerifyGetKey,
  errors as joseErrors,
  jwtVerify,
} from 'jose'
import { type Principal, ROLES, type Role } from '../auth.ts'
import type { Logger } from '../log.ts'
import type { OidcVerifier as Verifier } from './authenticator.ts'
import type { OidcConfig } from './oidcConfig.ts'

/** Clock skew tolerated on `exp` and `nbf`, in seconds. */
export const CLOCK_SKEW_SECONDS = 30
/** Only signatures by a public key: a symmetric algorithm would let the public key sign. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']
const DISCOVERY_TIMEOUT_MS = 5000

export interface OidcVerifierOptions {
  config: OidcConfig
  logger?: Pick<Logger, 'warn'>
  /** Least time between two key fetches. @default 30000 */
  jwksCooldownMs?: number
}

/** A name for a teams claim value: a list of strings, or one space- or comma-separated string. */
function teamsOf(value: unknown): string[] {
  if (Array.isArray(value)) return value.filter((t): t is string => typeof t === 'string' && t !== '')
  if (typeof value === 'string') return value.split(/[\s,]+/).filter((t) => t !== '')
  return []
}

/** The strongest role any of `teams` maps to (`*` maps every token), or null. */
export function strongestRole(teams: readonly string[], map: ReadonlyMap<string, Role>): Role | null {
  let best: Role | null = map.get('*') ?? null
  for (const team of teams) {
    const role = map.get(team)
    if (role && (best === null || ROLES.indexOf(role) > ROLES.indexOf(best))) best = role
  }
  return best
}

/** What was wrong with a token, in words its holder may read (never the token, never a key). */
function refusalDetail(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return 'expired'
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    if (err.claim === 'nbf' || err.claim === 'iat') return 'not yet valid'
    if (err.claim === 'iss') return 'wrong issuer'
    if (err.claim === 'aud') return 'wrong audience'
    if (err.claim === 'exp') return 'no expiry (exp)'
    return `claim ${err.claim} not valid`
  }
  if (err instanceof joseErrors.JWKSNoMatchingKey) return 'signed by a key the issuer does not publish'
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return 'algorithm not allowed'
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return 'bad signature'
  if (err instanceof joseErrors.JWKSTimeout) return 'the identity provider did not answer in time'
  if (err instanceof joseErrors.JOSEError) return 'malformed token'
  return 'the identity provider could not be reached'
}

/** What an issuer's discovery document says, as far as showrunner needs it. */
export interface Discovery {
  issuer: string
  jwks_uri: string
  authorization_endpoint?: string
  token_endpoint?: string
}

/** Read `issuer`'s discovery document; refuses one that names another issuer. */
export async function discover(issuer: string): Promise<Discovery> {
  const url = `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`
  const res = await fetch(url, { signal: AbortSignal.timeout(DISCOVERY_TIMEOUT_MS), redirect: 'error' })
  if (!res.ok) throw new Error(`OIDC discovery at ${url} answered HTTP ${res.status}`)
  const doc = (await res.json()) as Partial<Record<keyof Discovery, unknown>>
  if (doc.issuer !== issuer) {
    throw new Error(
      `OIDC discovery at ${url} names the issuer ${JSON.stringify(doc.issuer)}, not OIDC_ISSUER`,
    )
  }
  if (typeof doc.jwks_uri !== 'string') throw new Error(`OIDC discovery at ${url} has no jwks_uri`)
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined)
  return {
    issuer,
    jwks_uri: doc.jwks_uri,
    authorization_endpoint: str(doc.authorization_endpoint),
    token_endpoint: str(doc.token_endpoint),
  }
}

export class OidcVerifier implements Verifier {
  private keys: JWTVerifyGetKey | null = null
  private discovering: Promise<JWTVerifyGetKey> | null = null

  constructor(private readonly opts: OidcVerifierOptions) {}

  async verify(jwt: string): Promise<Principal | { detail: string }> {
    const cfg = this.opts.config
    let payload: JWTPayload
    try {
      const keys = await this.keySet()
      ;({ payload } = await jwtVerify(jwt, keys, {
        issuer: cfg.issuer,
        audience: cfg.audience,
        algorithms: ALGORITHMS,
        clockTolerance: CLOCK_SKEW_SECONDS,
        requiredClaims: ['exp'],
      }))
    } catch (err) {
      const detail = refusalDetail(err)
      if (!(err instanceof joseErrors.JOSEError) || err instanceof joseErrors.JWKSTimeout) {
        this.opts.logger?.warn({ err, issuer: cfg.issuer }, 'could not fetch the OIDC signing keys')
      }
      return { detail }
    }
    const teams = teamsOf(payload[cfg.teamsClaim])
    const role = strongestRole(teams, cfg.roleMap)
    if (!role)
      return { detail: `no team of this user is in OIDC_ROLE_MAP (teams from the ${cfg.teamsClaim} claim)` }
    const claimed = payload[cfg.nameClaim]
    // Without the name claim the subject is the best name there is.
    const name = (
      typeof claimed === 'string' && claimed.trim() !== '' ? claimed.trim() : String(payload.sub ?? '')
    ).slice(0, 191)
    if (name === '') return { detail: `no ${cfg.nameClaim} or sub claim to name the user by` }
    return {
      role,
      name,
      actor: name,
      teams,
      source: 'oidc',
      expiresAt: new Date((payload.exp as number) * 1000),
    }
  }

  private keySet(): Promise<JWTVerifyGetKey> {
    if (this.keys) return Promise.resolve(this.keys)
    this.discovering ??= this.locateKeys()
      .then((keys) => {
        this.keys = keys
        return keys
      })
      .finally(() => {
        // A failed discovery is tried again by the next token, not remembered.
        this.discovering = null
      })
    return this.discovering
  }

  private async locateKeys(): Promise<JWTVerifyGetKey> {
    const cfg = this.opts.config
    const options = {
      cooldownDuration: this.opts.jwksCooldownMs ?? 30_000,
      timeoutDuration: DISCOVERY_TIMEOUT_MS,
    }
    if (cfg.jwksUrl) return createRemoteJWKSet(new URL(cfg.jwksUrl), options)
    const doc = await discover(cfg.issuer)
    return createRemoteJWKSet(new URL(doc.jwks_uri), options)
  }
}
