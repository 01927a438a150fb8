import ipaddr from 'ipaddr.js'

/**
 * The webhook allow-list (`WEBHOOK_ALLOW`): which URLs a `core.webhook` step may
 * call. Both sides are normalised with the WHATWG URL parser, the same one
 * `fetch` uses, so what is checked is what is requested: scheme and host
 * lower-cased, default port dropped, IPv4 spellings like `0x7f.1` made canonical,
 * `.`/`..` segments (also `%2e%2e`) resolved, fragment dropped.
 */

/**
 * A URL or prefix after normalisation, or why it was refused; `reason` is a
 * phrase about the URL ("uses ftp: only http and https are allowed").
 */
export type NormalisedUrl = { ok: true; url: string } | { ok: false; reason: string }

function parseHttpUrl(input: string): URL | string {
  if (typeof input !== 'string' || input.trim() === '') return 'is empty'
  let url: URL
  try {
    url = new URL(input.trim())
  } catch {
    return 'is not an absolute URL'
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `uses ${url.protocol.replace(/:$/, '')}: only http and https are allowed`
  }
  // Credentials in a URL end up in logs and redirects; put them in headers instead.
  if (url.username !== '' || url.password !== '') return 'contains credentials (user:password@)'
  if (url.hostname === '') return 'has no host'
  url.hash = ''
  return url
}

/** Normalise a URL a webhook would call. */
export function normaliseUrl(input: string): NormalisedUrl {
  const url = parseHttpUrl(input)
  if (typeof url === 'string') return { ok: false, reason: url }
  // Servers that decode %2F before routing would see a path the prefix check did not.
  if (/%2f|%5c/i.test(url.pathname))
    return { ok: false, reason: 'has an encoded slash or backslash in its path' }
  return { ok: true, url: url.href }
}

/**
 * Normalise an allow-list prefix. A prefix without a path (`https://hooks.example.com`)
 * allows that origin only: it becomes `https://hooks.example.com/`.
 */
export function normaliseAllowPrefix(input: string): NormalisedUrl {
  const url = parseHttpUrl(input)
  if (typeof url === 'string') return { ok: false, reason: url }
  return { ok: true, url: url.href }
}

/**
 * Parse the comma-separated `WEBHOOK_ALLOW` setting. Answers the normalised
 * prefixes and a problem per entry that is not a usable http(s) prefix.
 */
export function parseAllowList(csv: string | undefined): { prefixes: string[]; problems: string[] } {
  const prefixes: string[] = []
  const problems: string[] = []
  for (const entry of (csv ?? '').split(',')) {
    if (entry.trim() === '') continue
    const n = normaliseAllowPrefix(entry)
    if (n.ok) prefixes.push(n.url)
    else problems.push(`WEBHOOK_ALLOW entry ${JSON.stringify(entry.trim())} ${n.reason}`)
  }
  return { prefixes, problems }
}

/**
 * Whether `url` matches `prefix`, both normalised. Starting with the prefix is
 * not enough: the match must end at a boundary, so `https://a.example/api`
 * allows `/api`, `/api/x` and `/api?x` but not `/apix`. A prefix ending in `/`
 * (every bare origin does) is its own boundary, so `https://hooks.example.com`
 * never allows `https://hooks.example.com.evil.net/`.
 */
function matchesPrefix(url: string, prefix: string): boolean {
  if (!url.startsWith(prefix)) return false
  if (url.length === prefix.length || prefix.endsWith('/') || prefix.includes('?')) return true
  const next = url[prefix.length]
  return next === '/' || next === '?'
}

/** True when `url` is an http(s) URL that starts, at a boundary, with one of `allowPrefixes`. */
export function isUrlAllowed(url: string, allowPrefixes: readonly string[]): boolean {
  const n = normaliseUrl(url)
  if (!n.ok) return false
  for (const raw of allowPrefixes) {
    const p = normaliseAllowPrefix(raw)
    if (p.ok && matchesPrefix(n.url, p.url)) return true
  }
  return false
}

/**
 * A URL as failure messages show it: scheme, host, port and path, with a query
 * shown as `?…` (query strings carry tokens), so a message names the URL a
 * person must fix without repeating what it may carry.
 */
export function shownUrl(url: string | URL): string {
  let u: URL
  try {
    u = typeof url === 'string' ? new URL(url) : url
  } catch {
    const text = String(url)
    const cut = text.search(/[?#]/)
    // A cut says so (`…`): what is cut may be the start of a secret, which the
    // webhook's scrubbing then drops (see SecretScope.scrubError).
    if (cut === -1) return text.length > 200 ? `${text.slice(0, 200)}…` : text
    return `${text.slice(0, Math.min(cut, 200))}${cut > 200 ? '…' : ''}?…`
  }
  return `${u.origin}${u.pathname}${u.search ? '?…' : ''}`
}

/**
 * Why `url` is refused, or null when it is allowed (for a failure message a
 * person can act on). The message names the URL, not the list: the list says
 * where else this instance may send, which is not the program author's business.
 */
export function allowListRefusal(url: string, allowPrefixes: readonly string[]): string | null {
  const n = normaliseUrl(url)
  // Quoted: the refused text is the caller's own, echoed so a person sees what was refused.
  if (!n.ok) return `the URL ${n.reason}: ${JSON.stringify(shownUrl(url))}`
  if (allowPrefixes.length === 0)
    return `webhooks are disabled (WEBHOOK_ALLOW is empty); refused ${shownUrl(n.url)}`
  if (isUrlAllowed(url, allowPrefixes)) return null
  return `${shownUrl(n.url)} is not in the webhook allow-list (WEBHOOK_ALLOW)`
}

/** What ipaddr.js's `range()` names, as a failure message says it. */
const RANGE_WORDS: Readonly<Record<string, string>> = {
  unspecified: 'an unspecified address',
  broadcast: 'a broadcast address',
  multicast: 'a multicast address',
  linkLocal: 'a link-local address',
  loopback: 'a loopback address',
  carrierGradeNat: 'a shared (carrier-grade NAT) address',
  private: 'a private address',
  reserved: 'a reserved address',
  uniqueLocal: 'a private (unique local) address',
  ipv4Mapped: 'an IPv4-mapped address',
  rfc6145: 'an IPv4-translated address',
  rfc6052: 'a NAT64 address (with an IPv4 address inside)',
  '6to4': 'a 6to4 address (with an IPv4 address inside)',
  teredo: 'a Teredo address',
  deprecatedSiteLocal: 'a site-local address',
}

/** `::a.b.c.d`, the deprecated IPv4-compatible form, which ipaddr.js counts as unicast. */
const IPV4_COMPATIBLE = ipaddr.parseCIDR('::/96')

/**
 * What kind of internal address `ip` is (loopback, private, link-local, NAT64,
 * …), or null for a public one. Classes come from ipaddr.js's `range()`:
 * only a plain `unicast` address is public, so every special range, and every
 * IPv6 form with an IPv4 address inside (mapped, NAT64, 6to4, Teredo,
 * IPv4-compatible), is internal whatever the IPv4 address in it.
 */
export function internalAddressKind(ip: string): string | null {
  let addr: ipaddr.IPv4 | ipaddr.IPv6
  try {
    addr = ipaddr.parse(ip.replace(/^\[|\]$/g, '').replace(/%.*$/, ''))
  } catch {
    return 'not an IP address'
  }
  const range = addr.range()
  if (range !== 'unicast') return RANGE_WORDS[range] ?? `a special-purpose address (${range})`
  if (addr.kind() === 'ipv6' && addr.match(IPV4_COMPATIBLE)) return 'an IPv4-compatible address'
  return null
}

/** `ip` in one spelling, whatever spelling it came in (`::ffff:127.0.0.1` and `::ffff:7f00:1` alike). */
function canonicalIp(ip: string): string {
  try {
    return ipaddr.parse(ip.replace(/^\[|\]$/g, '')).toNormalizedString()
  } catch {
    return ip.toLowerCase()
  }
}

/** The key an internal (address, port) exemption is looked up by. */
export function addressPortKey(ip: string, port: number): string {
  return `${canonicalIp(ip)}|${port}`
}

/**
 * The (IP literal, port) pairs the allow-list names (`http://10.0.0.5:8080/`
 * names 10.0.0.5 port 8080; a prefix without a port names its scheme's
 * default): the internal addresses a webhook may reach, each on that port
 * only. A hostname that resolves to any other internal address, or to a named
 * one on another port, is refused, so a DNS name on the list cannot be pointed
 * at the loopback, the cloud metadata service or the LAN, nor at another
 * service of an allowed internal host.
 */
export function allowedInternalAddresses(allowPrefixes: readonly string[]): Set<string> {
  const out = new Set<string>()
  for (const raw of allowPrefixes) {
    const p = normaliseAllowPrefix(raw)
    if (!p.ok) continue
    const u = new URL(p.url)
    const host = u.hostname.replace(/^\[|\]$/g, '').toLowerCase()
    if (!ipaddr.isValid(host)) continue
    const port = u.port === '' ? (u.protocol === 'https:' ? 443 : 80) : Number(u.port)
    out.add(addressPortKey(host, port))
  }
  return out
}
