/**
 * The request line and Host header, checked before anything parses them.
 *
 * Node's HTTP parser accepts request targets and Host values that the WHATWG
 * URL parser refuses (`GET http://a:99999/`, `Host: [zz`). Parsing them with
 * `new URL` throws; thrown inside the request listener that ends the process,
 * and inside yoga it answers 500. Both are the client's mistake, so they are
 * answered 400 here and never reach a parser that throws.
 */
import type { IncomingMessage } from 'node:http'

export type RequestTarget = { ok: true; pathname: string } | { ok: false; reason: string }

/** The path a request names, or why it names none a URL parser accepts. */
export function requestTarget(req: Pick<IncomingMessage, 'url' | 'headers'>): RequestTarget {
  const host = req.headers.host
  // Yoga rebuilds the absolute URL from Host, so a Host no URL accepts is refused too.
  if (host !== undefined && !URL.canParse(`http://${host}/`)) {
    return { ok: false, reason: 'the Host header is not a valid host[:port]' }
  }
  const target = req.url ?? '/'
  // Absolute-form targets (`GET http://host/path`) are allowed by HTTP/1.1; the
  // base only applies to origin-form ones.
  if (!URL.canParse(target, 'http://localhost')) {
    return { ok: false, reason: 'the request target is not a valid path or URL' }
  }
  return { ok: true, pathname: new URL(target, 'http://localhost').pathname }
}
