/**
 * Who is signed in, and the ways to sign in: the operations for the signed-in
 * person and for API keys, and single sign-on (authorization code + PKCE).
 *
 * SSO runs in the browser as a public client: the page makes a random
 * verifier, sends the person to the identity provider with its SHA-256
 * challenge, and on the way back exchanges the code together with the
 * verifier through `POST /auth/token` (the server only relays it, holding no
 * client secret). The verifier and a random `state` wait in sessionStorage
 * for the redirect back; a response whose state does not match is ignored.
 */
import { graphql, type ResultOf } from '../../src/client/graphql.ts'

export const SIGNED_IN_VIEWER = graphql(`query SignedInViewer { viewer { role actor name teams } }`)
export type SignedInViewerData = ResultOf<typeof SIGNED_IN_VIEWER>
export type SignedInViewer = SignedInViewerData['viewer']

const KEY_FIELDS = graphql(`
fragment KeyFields on ApiKey { id name role teams prefix createdAt createdBy expiresAt lastUsedAt revokedAt }`)
export type ApiKey = ResultOf<typeof KEY_FIELDS>

export const API_KEYS = graphql(`query ApiKeys { apiKeys(includeRevoked: true) { ...KeyFields } }`, [
  KEY_FIELDS,
])
export type ApiKeysData = ResultOf<typeof API_KEYS>
export const CREATE_API_KEY = graphql(
  `mutation CreateApiKey($name: String!, $role: Role!, $teams: [String!], $expiresAt: DateTime) {
  createApiKey(name: $name, role: $role, teams: $teams, expiresAt: $expiresAt) { key { ...KeyFields } secret } }`,
  [KEY_FIELDS],
)
export type CreateApiKeyData = ResultOf<typeof CREATE_API_KEY>
export const REVOKE_API_KEY = graphql(
  `mutation RevokeApiKey($id: ID!) { revokeApiKey(id: $id) { ...KeyFields } }`,
  [KEY_FIELDS],
)

/** What `GET /auth/config` says about single sign-on. */
export interface SsoConfig {
  issuer: string
  clientId: string
  authorizationEndpoint: string
  scope: string
  audience: string
}

export async function ssoConfig(): Promise<SsoConfig | null> {
  try {
    const res = await fetch('/auth/config', { headers: { accept: 'application/json' } })
    if (!res.ok) return null
    const body = (await res.json()) as { sso?: SsoConfig | null }
    return body.sso ?? null
  } catch {
    return null
  }
}

const PENDING_KEY = 'showrunner.sso'

function base64url(bytes: ArrayBuffer | Uint8Array): string {
  const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes)
  let s = ''
  for (const x of b) s += String.fromCharCode(x)
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

function random(n: number): string {
  return base64url(crypto.getRandomValues(new Uint8Array(n)))
}

/** Where the provider sends the person back: this page, without query or hash. */
function redirectUri(): string {
  return `${location.origin}/`
}

/** Send the person to the identity provider; they come back to this page with a code. */
export async function beginSso(cfg: SsoConfig): Promise<void> {
  if (!crypto.subtle) {
    throw new Error(
      'Single sign-on needs HTTPS (or localhost): this browser withholds the crypto it needs here.',
    )
  }
  const verifier = random(32)
  const state = random(16)
  const challenge = base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)))
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({ verifier, state, hash: location.hash }))
  const url = new URL(cfg.authorizationEndpoint)
  url.searchParams.set('response_type', 'code')
  url.searchParams.set('client_id', cfg.clientId)
  url.searchParams.set('redirect_uri', redirectUri())
  url.searchParams.set('scope', cfg.scope)
  url.searchParams.set('state', state)
  url.searchParams.set('code_challenge', challenge)
  url.searchParams.set('code_challenge_method', 'S256')
  // Auth0 issues a JWT access token only for a named API; others ignore the parameter.
  url.searchParams.set('audience', cfg.audience)
  location.assign(url.toString())
}

/**
 * On the way back from the provider: exchange the code for an access token.
 * Answers null when this page load is not a return from sign-in.
 * @throws Error with a message for the person when the sign-in failed
 */
export async function finishSso(): Promise<string | null> {
  const params = new URLSearchParams(location.search)
  const code = params.get('code')
  const error = params.get('error')
  if (!code && !error) return null
  const pending = (() => {
    try {
      return JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? 'null') as {
        verifier: string
        state: string
        hash: string
      } | null
    } catch {
      return null
    }
  })()
  sessionStorage.removeItem(PENDING_KEY)
  // The code must not stay in the address bar (or the history) once used.
  history.replaceState(null, '', `/${pending?.hash ?? ''}`)
  if (error) throw new Error(`The identity provider refused the sign-in (${error.slice(0, 60)}).`)
  if (!pending || params.get('state') !== pending.state) {
    throw new Error('That sign-in did not start from this tab; sign in again.')
  }
  const res = await fetch('/auth/token', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ code, codeVerifier: pending.verifier, redirectUri: redirectUri() }),
  })
  const body = (await res.json().catch(() => ({}))) as { accessToken?: string; error?: string }
  if (!res.ok || !body.accessToken) throw new Error(body.error ?? `Sign-in failed (HTTP ${res.status}).`)
  return body.accessToken
}
