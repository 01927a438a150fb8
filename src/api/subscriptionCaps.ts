/**
 * How many subscriptions may be open at once: per principal (over every
 * WebSocket and SSE stream it holds) and per instance. The per-socket cap
 * (WS_MAX_SUBSCRIPTIONS, src/api/ws.ts) alone let one viewer open 100 per
 * socket on as many sockets as it liked, and every open subscription is work
 * on each change the live feeds report (a delivery, a message, a socket
 * write) on the event loop the runner shares.
 *
 * A subscription is counted from the moment it is asked for (before its
 * stream is built, so a refused one costs no feed read) until its stream ends:
 * it completes, the client stops it, its socket closes or its SSE request is
 * aborted. Past the principal's cap it is refused with TOO_MANY_OPERATIONS
 * (the caller holds too many: finish some); past the instance's, with BUSY and,
 * over HTTP, 503 + Retry-After (this instance is full: retry, or another).
 * Either way the socket and the caller's other subscriptions stay as they are.
 */
import { type ExecutionResult, GraphQLError } from 'graphql'
import type { Plugin } from 'graphql-yoga'
import { ERROR_CODES } from '../errors.ts'
import type { Logger } from '../log.ts'
import type { ApiContext } from './context.ts'
import { API_CODES, BUSY_RETRY_AFTER_SECONDS, refusalWithHttp } from './errors.ts'

export interface SubscriptionCapsOptions {
  /** Subscriptions one principal may hold open at once (SUBSCRIPTIONS_PER_PRINCIPAL). */
  perPrincipal: number
  /** Subscriptions this instance holds open at once, everybody's together (SUBSCRIPTIONS_PER_INSTANCE). */
  perInstance: number
  logger?: Pick<Logger, 'warn'>
}

/** The counts behind the caps. */
export class SubscriptionCaps {
  private readonly byPrincipal = new Map<string, number>()
  private open = 0
  /** Subscriptions refused since start, by which cap (for tests and metrics). */
  readonly refused = { principal: 0, instance: 0 }

  constructor(readonly opts: SubscriptionCapsOptions) {}

  /** Open subscriptions right now, everybody's. */
  get total(): number {
    return this.open
  }

  /** Open subscriptions of `who` right now. */
  of(who: string): number {
    return this.byPrincipal.get(who) ?? 0
  }

  /**
   * Count one more subscription for `who`, or say why not. Answers the
   * function that gives the place back (calling it twice is harmless).
   */
  take(who: string): { release: () => void } | { refusal: GraphQLError } {
    const mine = this.of(who)
    if (mine >= this.opts.perPrincipal) {
      this.refused.principal++
      return { refusal: tooManyForPrincipal(this.opts.perPrincipal) }
    }
    if (this.open >= this.opts.perInstance) {
      this.refused.instance++
      return { refusal: instanceFull(this.opts.perInstance) }
    }
    this.byPrincipal.set(who, mine + 1)
    this.open++
    let released = false
    return {
      release: () => {
        if (released) return
        released = true
        this.open--
        const left = this.of(who) - 1
        if (left > 0) this.byPrincipal.set(who, left)
        else this.byPrincipal.delete(who)
      },
    }
  }
}

function tooManyForPrincipal(limit: number): GraphQLError {
  return new GraphQLError(
    `Too many subscriptions: one caller may have at most ${limit} open at once, over all its sockets and streams (SUBSCRIPTIONS_PER_PRINCIPAL). Complete some first.`,
    { extensions: { code: API_CODES.TOO_MANY_OPERATIONS } },
  )
}

function instanceFull(limit: number): GraphQLError {
  // SSE answers 503 with Retry-After; graphql-ws gets the code alone.
  return refusalWithHttp(
    `The server is busy: it holds as many subscriptions as it takes (${limit}, SUBSCRIPTIONS_PER_INSTANCE). Retry in a moment, or use another instance.`,
    ERROR_CODES.BUSY,
    { status: 503, headers: { 'retry-after': String(BUSY_RETRY_AFTER_SECONDS) } },
  )
}

/** `source`, calling `release` once when it ends however it ends (done, return, throw). */
function releasing<T>(source: AsyncIterableIterator<T>, release: () => void): AsyncIterableIterator<T> {
  return {
    [Symbol.asyncIterator]() {
      return this
    },
    async next() {
      try {
        const step = await source.next()
        if (step.done) release()
        return step
      } catch (err) {
        release()
        throw err
      }
    },
    async return(value?: unknown) {
      release()
      return (await source.return?.(value)) ?? { done: true, value: undefined }
    },
    async throw(error: unknown) {
      release()
      if (source.throw) return source.throw(error)
      throw error
    },
  }
}

/** A yoga plugin: every subscription (WebSocket or SSE) counted against `caps`. */
export function useSubscriptionCaps(caps: SubscriptionCaps): Plugin<ApiContext> {
  return {
    onSubscribe({ args, setResultAndStopExecution }) {
      const principal = (args.contextValue as ApiContext).principal
      // The auth gate refuses the anonymous before this; nothing to count.
      if (!principal) return
      const taken = caps.take(principal.actor)
      if ('refusal' in taken) {
        caps.opts.logger?.warn(
          {
            actor: principal.actor,
            code: taken.refusal.extensions.code,
            perPrincipal: caps.opts.perPrincipal,
            perInstance: caps.opts.perInstance,
            open: caps.total,
          },
          'refused a subscription: too many open',
        )
        setResultAndStopExecution({ errors: [taken.refusal] })
        return
      }
      return {
        onSubscribeResult({ result, setResult }) {
          if (!(Symbol.asyncIterator in result)) {
            // An error instead of a stream (validation, NOT_FOUND): nothing stays open.
            taken.release()
            return
          }
          setResult(releasing(result as AsyncIterableIterator<ExecutionResult>, taken.release))
        },
        onSubscribeError() {
          taken.release()
        },
      }
    },
  }
}
