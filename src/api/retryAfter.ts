/**
 * `Retry-After` on HTTP answers that carry a RATE_LIMITED error: the largest
 * `extensions.retryAfterSeconds` among its errors. (GraphQL answers stay HTTP
 * 200, as for any error raised while executing; the header is for clients and
 * proxies that look for it. graphql-ws has no headers: the extension is there.)
 */
import type { ExecutionResult } from 'graphql'
import type { Plugin } from 'graphql-yoga'
import { ERROR_CODES } from '../errors.ts'

function retryAfterOf(result: ExecutionResult): number | null {
  let most: number | null = null
  for (const e of result.errors ?? []) {
    const seconds = e.extensions?.retryAfterSeconds
    if (e.extensions?.code === ERROR_CODES.RATE_LIMITED && typeof seconds === 'number') {
      most = Math.max(most ?? 0, seconds)
    }
  }
  return most
}

export function useRetryAfterHeader(): Plugin {
  const pending = new WeakMap<Request, number>()
  return {
    onResultProcess({ request, result }) {
      if (Array.isArray(result) || !result || typeof result !== 'object' || !('errors' in result)) return
      const seconds = retryAfterOf(result as ExecutionResult)
      if (seconds !== null) pending.set(request, seconds)
    },
    onResponse({ request, response }) {
      const seconds = pending.get(request)
      if (seconds !== undefined) response.headers.set('Retry-After', String(seconds))
    },
  }
}
