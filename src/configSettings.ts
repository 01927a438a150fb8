/**
 * How each environment setting is read: the zod parsers behind src/config.ts,
 * one per kind of value (whole numbers in a range, one of a few words, URLs)
 * and one per setting whose syntax is its own (SHOWRUNNER_TOKENS,
 * WEBHOOK_ALLOW, RUNNER_ID, DATABASE_URL). Each problem names its variable and
 * what it got; token values are never echoed.
 */
import { z } from 'zod'
import { parseDatabaseUrl } from '../sql/db.ts'
import { isRole, ROLES, type TokenEntry, tokenEntry } from './auth.ts'

/** Tokens shorter than this are accepted with a warning: they are guessable. */
export const MIN_TOKEN_LENGTH = 16
/** Column width of `claimed_by` and `runner_heartbeats.instance_id`. */
const MAX_INSTANCE_ID = 100

/** A value as it appears in a message: quoted, and cut short so a pasted blob does not flood the log. */
function shown(raw: string): string {
  const s = raw.length > 60 ? `${raw.slice(0, 57)}...` : raw
  return `'${s}'`
}

/** Empty and blank variables count as unset, as compose files and shells often leave them. */
export const optionalString = z.preprocess(
  (v) => (typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined),
  z.string().optional(),
)

/** An optional absolute URL with one of `protocols` (PUBLIC_URL, SMTP_URL). */
export function urlSetting(name: string, protocols: readonly string[]) {
  return optionalString.transform((raw, ctx): string | undefined => {
    if (raw === undefined) return undefined
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      ctx.addIssue({
        code: 'custom',
        message: `${name} must be an absolute URL (${protocols.join(' or ')}//…)`,
      })
      return z.NEVER
    }
    if (!protocols.includes(url.protocol)) {
      ctx.addIssue({
        code: 'custom',
        message: `${name} must use ${protocols.join(' or ')}, not ${url.protocol}`,
      })
      return z.NEVER
    }
    return raw
  })
}

export function wholeNumber(name: string, def: number, min: number, max: number, what: string) {
  return optionalString.transform((raw, ctx) => {
    if (raw === undefined) return def
    const n = /^\d+$/.test(raw) ? Number(raw) : Number.NaN
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      ctx.addIssue({ code: 'custom', message: `${name} must be ${what} (got ${shown(raw)})` })
      return z.NEVER
    }
    return n
  })
}

export function oneOf<const T extends readonly string[]>(name: string, values: T, def: T[number]) {
  return optionalString.transform((raw, ctx): T[number] => {
    if (raw === undefined) return def
    const v = raw.toLowerCase()
    if (!values.includes(v)) {
      const list = values.map((x) => `'${x}'`).join(', ')
      ctx.addIssue({ code: 'custom', message: `${name} must be one of ${list} (got ${shown(raw)})` })
      return z.NEVER
    }
    return v
  })
}

/** What a bootstrap token may be named: a letter or digit, then letters, digits, spaces and `._@+-`. */
const TOKEN_NAME = /^[\p{L}\p{N}][\p{L}\p{N} ._@+-]{0,99}$/u

/**
 * `name=token` or a bare token. A token may itself hold `=` (base64 padding
 * at its end), so the entry is named only when what precedes the first `=` is
 * a plausible name and something other than more `=` follows it: `abc==`
 * stays the token `abc==`.
 */
export function splitNamedToken(rest: string): { name?: string; token: string } {
  const eq = rest.indexOf('=')
  if (eq <= 0) return { token: rest }
  const name = rest.slice(0, eq).trim()
  const token = rest.slice(eq + 1).trim()
  if (!TOKEN_NAME.test(name) || token === '' || /^=*$/.test(token)) return { token: rest }
  return { name, token }
}

export const tokensSchema = optionalString.transform((raw, ctx): TokenEntry[] => {
  if (raw === undefined) return []
  const out: TokenEntry[] = []
  const seen = new Map<string, number>()
  const problem = (message: string) =>
    ctx.addIssue({ code: 'custom', message: `SHOWRUNNER_TOKENS ${message}` })
  const entries = raw.split(',').map((e) => e.trim())
  entries.forEach((entry, i) => {
    const n = i + 1
    if (entry === '') return // a trailing or doubled comma is harmless
    const colon = entry.indexOf(':')
    if (colon < 0) {
      // The entry may be a bare token: say where it is, never what it is.
      problem(`entry ${n} is not role:token (expected e.g. admin:<token>)`)
      return
    }
    const role = entry.slice(0, colon).trim().toLowerCase()
    const { name, token } = splitNamedToken(entry.slice(colon + 1).trim())
    let ok = true
    if (!isRole(role)) {
      problem(`entry ${n} has unknown role ${shown(role)} (roles: ${ROLES.join(', ')})`)
      ok = false
    }
    // A short token is allowed (a warning at start says so): refusing to start
    // would break existing set-ups over a policy the operator may have reasons for.
    if (token.length === 0) {
      problem(`entry ${n} has an empty token (expected e.g. admin:<token>)`)
      ok = false
    } else if (/\s/.test(token)) {
      problem(`entry ${n}: the token contains whitespace, which an Authorization header cannot carry`)
      ok = false
    }
    const first = seen.get(token)
    if (first !== undefined && token !== '') {
      problem(`entries ${first} and ${n} use the same token; each token must be distinct`)
      ok = false
    } else {
      seen.set(token, n)
    }
    if (ok && isRole(role)) out.push(tokenEntry(role, token, name))
  })
  return out
})

export const webhookAllowSchema = optionalString.transform((raw, ctx): string[] => {
  if (raw === undefined) return []
  const out: string[] = []
  for (const entry of raw.split(',').map((e) => e.trim())) {
    if (entry === '') continue
    const problem = (why: string) =>
      ctx.addIssue({ code: 'custom', message: `WEBHOOK_ALLOW entry ${shown(entry)} ${why}` })
    let u: URL
    try {
      u = new URL(entry)
    } catch {
      problem('is not an absolute URL (expected e.g. https://hooks.example.com/)')
      continue
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') {
      problem(`must use http or https (got ${u.protocol.replace(/:$/, '')})`)
      continue
    }
    if (u.username || u.password) {
      problem('must not carry credentials; put them in the step headers')
      continue
    }
    if (u.hash) {
      problem('must not have a #fragment')
      continue
    }
    // WHATWG normalisation lower-cases the host, drops default ports and adds the
    // root '/', so 'http://127.0.0.1:8080' cannot also allow 'http://127.0.0.1:8080.evil.com'.
    if (!out.includes(u.href)) out.push(u.href)
  }
  return out
})

export const instanceIdSchema = optionalString.transform((raw, ctx) => {
  if (raw === undefined) return undefined
  if (raw.length > MAX_INSTANCE_ID || /[\s\p{Cc}]/u.test(raw)) {
    ctx.addIssue({
      code: 'custom',
      message: `INSTANCE_ID must be 1 to ${MAX_INSTANCE_ID} characters without spaces (got ${shown(raw)})`,
    })
    return z.NEVER
  }
  return raw
})

export const databaseUrlSchema = optionalString.transform((raw, ctx) => {
  if (raw === undefined) return undefined
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(raw)?.[1]?.toLowerCase()
  if (scheme !== 'mysql' && scheme !== 'mariadb') {
    // The URL may hold a password: show only its scheme.
    ctx.addIssue({
      code: 'custom',
      message: `DATABASE_URL must look like mysql://user:pass@host:3306/db (got ${scheme ? `${scheme}:` : 'not a URL'})`,
    })
    return z.NEVER
  }
  try {
    // One server, or several nodes of one Galera cluster: mysql://u:p@h1:3306,h2:3306/db.
    parseDatabaseUrl(raw)
  } catch (err) {
    // parseDatabaseUrl's messages never repeat the password.
    const why = err instanceof Error ? err.message.replace(/^The database URL/, 'DATABASE_URL') : String(err)
    ctx.addIssue({ code: 'custom', message: why })
    return z.NEVER
  }
  return raw
})
