/**
 * Subscriptions end with their credential. A subscription's stream is
 * wrapped so that when the caller's API key is revoked (on any instance: the
 * keyring's poll sees it within STATUS_POLL_MS) or expires, or its JWT
 * expires, the stream sends one last result carrying UNAUTHENTICATED and
 * ends: an SSE response finishes; over WebSocket the socket itself is closed
 * with 4401 as well (src/api/ws.ts).
 */
import type { ExecutionResult } from 'graphql'
import { type Plugin, Repeater } from 'graphql-yoga'
import type { Authenticator } from '../identity/authenticator.ts'
import { unauthenticatedError } from './authz.ts'
import type { ApiContext } from './context.ts'

const ENDED: unique symbol = Symbol('ended')

export function endWhenCredentialEnds<T>(
  source: AsyncIterable<T>,
  watch: (onEnd: (why: 'revoked' | 'expired') => void) => () => void,
  lastWord: (why: 'revoked' | 'expired') => T,
): AsyncIterable<T> {
  return new Repeater<T>(async (push, stop) => {
    const iterator = source[Symbol.asyncIterator]()
    let ended: (why: 'revoked' | 'expired') => void = () => {}
    const credentialEnded = new Promise<'revoked' | 'expired'>((resolve) => {
      ended = resolve
    })
    const unwatch = watch((why) => ended(why))
    const stopped: Promise<typeof ENDED> = stop.then(() => ENDED)
    try {
      for (;;) {
        const next: IteratorResult<T> | typeof ENDED | 'revoked' | 'expired' = await Promise.race([
          iterator.next(),
          credentialEnded,
          stopped,
        ])
        if (next === ENDED) break
        if (next === 'revoked' || next === 'expired') {
          await push(lastWord(next))
          break
        }
        if (next.done) break
        await push(next.value)
      }
    } finally {
      unwatch()
      stop()
      await iterator.return?.()
    }
  })
}

export function useEndSubscriptionsWithCredential(authenticator: Authenticator): Plugin<ApiContext> {
  return {
    onSubscribe({ args }) {
      const principal = (args.contextValue as ApiContext).principal
      // Bootstrap tokens never end: their streams are left exactly as they were.
      if (!principal || (principal.keyId === undefined && !principal.expiresAt)) return
      return {
        onSubscribeResult({ result, setResult }) {
          if (!(Symbol.asyncIterator in result)) return
          setResult(
            endWhenCredentialEnds<ExecutionResult>(
              result as AsyncIterable<ExecutionResult>,
              (onEnd) => authenticator.watch(principal, onEnd),
              (why) => ({ errors: [unauthenticatedError(why)] }),
            ) as AsyncIterableIterator<ExecutionResult>,
          )
        },
      }
    },
  }
}
