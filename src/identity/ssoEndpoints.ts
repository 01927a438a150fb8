/**
 * The two plain HTTP routes behind the console's "Sign in with SSO":
 *
 * - `GET /auth/config`: public, no token: whether SSO is offered and, if so,
 *   the issuer, the client id and where to send the person to sign in. A
 *   client id is not a secret; nothing else is answered.
 * - `POST /auth/token` `{ code, codeVerifier, redirectUri }`: the console's
 *   authorization code exchanged at the issuer's token endpoint, as a public
 *   client (no client secret exists anywhere): PKCE's verifier, made in the
 *   browser, is what proves the code is the console's. The exchange goes
 *   through this server so the page keeps talking only to its own origin (its
 *   Content-Security-Policy allows nothing else) and works with providers
 *   that send no CORS headers. The answer is the access token and when it
 *   expires; the token is then an ordinary bearer credential, checked on
 *   every request like any other.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { sendJson } from '../httpReply.ts'
import type { Logger } from '../log.ts'
import { type Discovery, discover } from './oidc.ts'
import type { OidcConfig } from './oidcConfig.ts'

export const AUTH_PATHS = new Set(['/auth/config', '/auth/token'])
/** The scopes the console asks for: enough for a name and, with most providers, groups. */
const SCOPE = 'openid profile email'
const MAX_BODY = 16 * 1024
const EXCHANGE_TIMEOUT_MS = 10_000
/** Code exchanges in flight at once: a flood of them must not become a flood at the provider. */
const MAX_EXCHANGES = 16

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += (chunk as Buffer).length
    if (size > MAX_BODY) throw new Error('too large')
    chunks.push(chunk as Buffer)
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

export function createSsoHandler(oidc: OidcConfig | null, logger: Logger) {
  let discovered: Promise<Discovery> | null = null
  let exchanging = 0
  const discovery = (cfg: OidcConfig) => {
    discovered ??= discover(cfg.issuer).catch((err: unknown) => {
      discovered = null
      throw err
    })
    return discovered
  }

  return async function handleAuth(
    req: IncomingMessage,
    res: ServerResponse,
    pathname: string,
  ): Promise<void> {
    const offered = oidc?.clientId ? oidc : null
    if (pathname === '/auth/config') {
      if (req.method !== 'GET' && req.method !== 'HEAD')
        return sendJson(res, 405, { ok: false, error: 'Use GET.' })
      if (!offered) return sendJson(res, 200, { sso: null })
      try {
        const d = await discovery(offered)
        if (!d.authorization_endpoint || !d.token_endpoint) {
          throw new Error('the discovery document names no authorization_endpoint or token_endpoint')
        }
        return sendJson(res, 200, {
          sso: {
            issuer: offered.issuer,
            clientId: offered.clientId,
            authorizationEndpoint: d.authorization_endpoint,
            scope: SCOPE,
            audience: offered.audience,
          },
        })
      } catch (err) {
        logger.warn({ err, issuer: offered.issuer }, 'SSO: could not read the issuer discovery document')
        return sendJson(res, 503, {
          ok: false,
          error:
            'Single sign-on is configured but the identity provider does not answer; sign in with a token.',
        })
      }
    }
    // /auth/token
    if (req.method !== 'POST') return sendJson(res, 405, { ok: false, error: 'Use POST.' })
    if (!offered)
      return sendJson(res, 404, { ok: false, error: 'Single sign-on is not configured (OIDC_CLIENT_ID).' })
    // JSON only: a browser cannot send it cross-site without a preflight this route never answers.
    if (!/^application\/json\b/i.test(String(req.headers['content-type'] ?? ''))) {
      return sendJson(res, 415, { ok: false, error: 'Send Content-Type: application/json.' })
    }
    let body: { code?: unknown; codeVerifier?: unknown; redirectUri?: unknown }
    try {
      body = (await readJson(req)) as typeof body
    } catch {
      return sendJson(res, 400, {
        ok: false,
        error: 'Send a JSON object { code, codeVerifier, redirectUri } of at most 16 KB.',
      })
    }
    const { code, codeVerifier, redirectUri } = body ?? {}
    if (
      typeof code !== 'string' ||
      typeof codeVerifier !== 'string' ||
      typeof redirectUri !== 'string' ||
      code === ''
    ) {
      return sendJson(res, 400, {
        ok: false,
        error: 'code, codeVerifier and redirectUri are required strings.',
      })
    }
    if (exchanging >= MAX_EXCHANGES) {
      res.setHeader('retry-after', '1')
      return sendJson(res, 503, { ok: false, error: 'Too many sign-ins at once; retry in a moment.' })
    }
    exchanging++
    try {
      const d = await discovery(offered)
      if (!d.token_endpoint) throw new Error('no token_endpoint')
      const answer = await fetch(d.token_endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code,
          code_verifier: codeVerifier,
          redirect_uri: redirectUri,
          client_id: offered.clientId as string,
        }),
        signal: AbortSignal.timeout(EXCHANGE_TIMEOUT_MS),
        redirect: 'error',
      })
      const tokens = (await answer.json().catch(() => ({}))) as Record<string, unknown>
      if (!answer.ok || typeof tokens.access_token !== 'string') {
        // The provider's error code (e.g. invalid_grant) helps; its tokens, if any, are never logged.
        const why = typeof tokens.error === 'string' ? tokens.error.slice(0, 60) : `HTTP ${answer.status}`
        logger.warn({ status: answer.status, error: why }, 'SSO: the identity provider refused the code')
        return sendJson(res, 400, {
          ok: false,
          error: `The identity provider refused the sign-in (${why}); try again.`,
        })
      }
      return sendJson(res, 200, {
        accessToken: tokens.access_token,
        expiresIn: typeof tokens.expires_in === 'number' ? tokens.expires_in : null,
      })
    } catch (err) {
      logger.warn({ err }, 'SSO: could not reach the identity provider to exchange a code')
      return sendJson(res, 502, {
        ok: false,
        error: 'The identity provider does not answer; try again, or sign in with a token.',
      })
    } finally {
      exchanging--
    }
  }
}
