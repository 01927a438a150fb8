/**
 * Roles, principals and bootstrap tokens: viewers read and subscribe,
 * operators also control runs, admins also manage definitions.
 *
 * A {@link Principal} is who a request comes from: a name, teams and a role,
 * whichever credential proved it (a bootstrap token from `SHOWRUNNER_TOKENS`,
 * an API key, an OIDC token; see src/identity/). Its `name` is what lands in
 * logs and audit rows. A bootstrap token written `role:token` is named after a
 * hash of the token (`role#hash8`), never the token itself; one written
 * `role:name=token` is named `name`.
 */
import { createHash, timingSafeEqual } from 'node:crypto'

/** Every role, weakest first: each includes everything before it. */
export const ROLES = ['viewer', 'operator', 'admin'] as const
export type Role = (typeof ROLES)[number]

/** Which kind of credential proved a principal. */
export type CredentialSource = 'token' | 'apiKey' | 'oidc'

/** The caller behind a request: who it is, what it may do, and the name its actions are recorded under. */
export interface Principal {
  role: Role
  /** The person's (or service's) name: what logs, audit rows, startedBy and cue answers record. */
  name: string
  /** Teams the caller belongs to (cue assignment); empty for bootstrap tokens. */
  teams: readonly string[]
  /** The same as `name`; kept because `Viewer.actor` and older callers read it. */
  actor: string
  source: CredentialSource
  /** The API key's id when `source` is 'apiKey'. */
  keyId?: number
  /** When the credential stops being valid (an API key's expiry, a JWT's `exp`); open subscriptions end then. */
  expiresAt?: Date | null
}

/** One configured token, as `loadConfig` produces it. */
export interface TokenEntry extends Principal {
  token: string
}

/** A bootstrap token's principal: named `name` when given, else `role#hash8`. */
export function tokenEntry(role: Role, token: string, name?: string): TokenEntry {
  const n = name ?? tokenActor(role, token)
  return { role, token, name: n, actor: n, teams: [], source: 'token' }
}

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value)
}

/** True when `role` may do what `needed` may: admin ⊇ operator ⊇ viewer. */
export function roleAllows(role: Role, needed: Role): boolean {
  return ROLES.indexOf(role) >= ROLES.indexOf(needed)
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest()
}

/** The log-safe name of a token: its role and the first 8 hex digits of its SHA-256. */
export function tokenActor(role: Role, token: string): string {
  return `${role}#${sha256(token).toString('hex').slice(0, 8)}`
}

// Digests of configured tokens, computed once per entry rather than per request.
const digests = new WeakMap<TokenEntry, Buffer>()
function digestOf(entry: TokenEntry): Buffer {
  let d = digests.get(entry)
  if (!d) {
    d = sha256(entry.token)
    digests.set(entry, d)
  }
  return d
}

const BEARER = /^\s*bearer\s+(\S+)\s*$/i

/**
 * Who sent `header` (an `Authorization` value, or a WebSocket
 * `connectionParams.authorization`), or null when it names no configured token.
 *
 * Both sides are hashed before comparison so every comparison is over 32 bytes:
 * `timingSafeEqual` then reveals neither a token's length nor how much of it
 * matched, and the loop compares against every token without stopping early so
 * the time taken does not say which entry (if any) matched.
 */
export function authenticate(
  header: string | undefined | null,
  tokens: readonly TokenEntry[],
): Principal | null {
  if (typeof header !== 'string') return null
  const m = BEARER.exec(header)
  if (!m?.[1]) return null
  const given = sha256(m[1])
  let found: TokenEntry | null = null
  for (const entry of tokens) {
    const same = timingSafeEqual(given, digestOf(entry))
    if (same && found === null) found = entry
  }
  if (!found) return null
  const { token: _secret, ...principal } = found
  return principal
}
