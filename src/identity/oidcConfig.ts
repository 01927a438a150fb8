/**
 * The OIDC variables: OIDC_ISSUER, OIDC_AUDIENCE, OIDC_JWKS_URL,
 * OIDC_NAME_CLAIM, OIDC_TEAMS_CLAIM, OIDC_ROLE_MAP and OIDC_CLIENT_ID. Read
 * apart from the rest of the configuration (src/config.ts calls this) so the
 * identity settings stay together; problems are reported with the others.
 */
import { isRole, ROLES, type Role } from '../auth.ts'

export interface OidcConfig {
  /** The `iss` every accepted token carries, exactly. */
  issuer: string
  /** The `aud` every accepted token must include. */
  audience: string
  /** Where the signing keys are; undefined: discovered from the issuer. */
  jwksUrl: string | undefined
  /** The claim a person's name is read from. @default 'email' */
  nameClaim: string
  /** The claim a person's teams are read from. @default 'groups' */
  teamsClaim: string
  /** Team → role; `*` matches any token of the issuer. The strongest match wins. */
  roleMap: ReadonlyMap<string, Role>
  /** The client id the console signs in with (authorization code + PKCE); undefined: no SSO button. */
  clientId: string | undefined
}

function value(env: Record<string, string | undefined>, name: string): string | undefined {
  const v = env[name]
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined
}

function httpUrl(raw: string): boolean {
  try {
    const u = new URL(raw)
    return u.protocol === 'https:' || u.protocol === 'http:'
  } catch {
    return false
  }
}

/** `team=role,team=role`; answers the map, or the problems with it. */
export function parseRoleMap(raw: string): { map: Map<string, Role>; problems: string[] } {
  const map = new Map<string, Role>()
  const problems: string[] = []
  raw.split(',').forEach((entry, i) => {
    const e = entry.trim()
    if (e === '') return
    const eq = e.lastIndexOf('=')
    const team = eq > 0 ? e.slice(0, eq).trim() : ''
    const role =
      eq > 0
        ? e
            .slice(eq + 1)
            .trim()
            .toLowerCase()
        : ''
    if (team === '' || !isRole(role)) {
      problems.push(
        `OIDC_ROLE_MAP entry ${i + 1} is not team=role with a role of ${ROLES.join(', ')} (got '${e.slice(0, 60)}')`,
      )
      return
    }
    const before = map.get(team)
    // The same team named twice: keep the stronger role, as a match would.
    if (!before || ROLES.indexOf(role) > ROLES.indexOf(before)) map.set(team, role)
  })
  return { map, problems }
}

export function loadOidcConfig(env: Record<string, string | undefined>): {
  oidc: OidcConfig | null
  problems: string[]
} {
  const issuer = value(env, 'OIDC_ISSUER')
  const others = ['OIDC_AUDIENCE', 'OIDC_JWKS_URL', 'OIDC_ROLE_MAP', 'OIDC_CLIENT_ID'].filter((n) =>
    value(env, n),
  )
  if (!issuer) {
    return {
      oidc: null,
      problems:
        others.length > 0
          ? [`${others.join(', ')} set without OIDC_ISSUER: set the issuer too, or unset them`]
          : [],
    }
  }
  const problems: string[] = []
  if (!httpUrl(issuer)) problems.push(`OIDC_ISSUER must be an http(s) URL (got '${issuer.slice(0, 60)}')`)
  const audience = value(env, 'OIDC_AUDIENCE')
  if (!audience) {
    problems.push(
      'OIDC_AUDIENCE is required with OIDC_ISSUER: without it, any token the issuer made for any application would be accepted',
    )
  }
  const jwksUrl = value(env, 'OIDC_JWKS_URL')
  if (jwksUrl !== undefined && !httpUrl(jwksUrl)) {
    problems.push(`OIDC_JWKS_URL must be an http(s) URL (got '${jwksUrl.slice(0, 60)}')`)
  }
  const rawMap = value(env, 'OIDC_ROLE_MAP')
  let roleMap = new Map<string, Role>()
  if (!rawMap) {
    problems.push(
      'OIDC_ROLE_MAP is required with OIDC_ISSUER (e.g. "stage=operator,admins=admin"): a token whose teams map to no role is refused',
    )
  } else {
    const parsed = parseRoleMap(rawMap)
    problems.push(...parsed.problems)
    roleMap = parsed.map
    if (parsed.problems.length === 0 && roleMap.size === 0) problems.push('OIDC_ROLE_MAP names no team')
  }
  if (problems.length > 0) return { oidc: null, problems }
  return {
    oidc: {
      issuer,
      audience: audience as string,
      jwksUrl,
      nameClaim: value(env, 'OIDC_NAME_CLAIM') ?? 'email',
      teamsClaim: value(env, 'OIDC_TEAMS_CLAIM') ?? 'groups',
      roleMap,
      clientId: value(env, 'OIDC_CLIENT_ID'),
    },
    problems: [],
  }
}
