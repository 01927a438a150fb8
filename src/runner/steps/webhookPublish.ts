import { allowListRefusal, normaliseAllowPrefix } from './allowList.ts'

/**
 * The allow-list check a `core.webhook` URL gets at publish, so a URL that
 * `WEBHOOK_ALLOW` refuses is refused when the program is written, not when
 * the show reaches it. The run-time check stays: it is the one that sees the
 * rendered URL and the address its host resolves to.
 *
 * A URL with a placeholder (`{{…}}`) is checked as far as it is written out:
 * - placeholder after the host (in the path or query): the URL up to the first
 *   placeholder must be one that some allow-list entry could still allow (it
 *   starts with an entry, or an entry starts with it);
 * - placeholder in the scheme, host or port: only the scheme is checked (an
 *   entry must use it), since the host is not known until the run renders it.
 * An empty allow-list refuses every webhook: webhooks are disabled.
 *
 * Answers why the URL is refused (naming WEBHOOK_ALLOW), or null.
 */
export function publishedUrlRefusal(url: string, allowPrefixes: readonly string[]): string | null {
  const at = url.indexOf('{{')
  if (at < 0) return allowListRefusal(url, allowPrefixes)
  if (allowPrefixes.length === 0)
    return 'webhooks are disabled (WEBHOOK_ALLOW is empty), so no webhook URL can be allowed'
  const entries = allowPrefixes.flatMap((raw) => {
    const n = normaliseAllowPrefix(raw)
    return n.ok ? [n.url] : []
  })
  const written = url.slice(0, at).trim()
  const origin = /^([a-z][a-z0-9+.-]*:\/\/[^/?#{]+)[/?#]/i.exec(written)
  if (!origin) {
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(written)?.[1]?.toLowerCase()
    if (scheme === undefined || entries.some((e) => e.startsWith(`${scheme}:`))) return null
    return `uses ${scheme}:, which no entry of the webhook allow-list (WEBHOOK_ALLOW) allows`
  }
  let known: string
  try {
    // The written part parsed alone: scheme and host lower-cased, default port
    // dropped, as the entries are. The comparison is loose (no boundary
    // check): publish refuses only what no rendering could make allowed.
    known = new URL(written).href
  } catch {
    return `${written}… is not the start of an absolute URL`
  }
  if (entries.some((e) => known.startsWith(e) || e.startsWith(known))) return null
  return `${known}{{…}} cannot be allowed by the webhook allow-list (WEBHOOK_ALLOW) whatever the placeholder renders to`
}
