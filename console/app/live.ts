/**
 * `useLive`: a query kept current. With a subscription the server pushes each
 * change (or a nudge to refetch); when the server offers no such subscription
 * (or the WebSocket is blocked), the query is polled instead. Polling waits for
 * each answer before scheduling the next, so a slow server is never queued up.
 *
 * A subscription that sends changes rather than whole data (`reduce`) owns the
 * data while its socket is up: a poll's answer is read at another moment than
 * the change that follows it is relative to, so it is not shown then, and the
 * slow safety poll subscribes afresh instead (the stream starts again with
 * the whole data).
 */

import { print } from '@0no-co/graphql.web'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import type { TadaDocumentNode } from '../../src/client/graphql.ts'
import { ApiError, gql, liveSocketUp, onSocketChange, pollMs, subscribe } from './api.ts'

// biome-ignore lint/suspicious/noExplicitAny: documents of any variables' shape.
type Document<T> = TadaDocumentNode<T, any>

export interface LiveOptions<T> {
  variables?: Record<string, unknown>
  /** A subscription whose every event either is the new data (`apply` answers it) or means "refetch". */
  subscription?: {
    query: Document<unknown>
    variables?: Record<string, unknown>
    apply?: (event: unknown) => T | null
    /**
     * The events are changes: the data after `event`, given what this
     * subscription's events made so far (undefined before its first), or
     * null when the event cannot be placed (then it subscribes afresh).
     */
    reduce?: (held: T | undefined, event: unknown) => T | null
  }
  /** Poll interval while no subscription feeds the data. @default the server's suggestion */
  pollMs?: number
  /**
   * Poll interval while a subscription is live, for what it does not cover and
   * in case the socket silently stalls. @default ten times the polling interval
   */
  livePollMs?: number
}

export interface Live<T> {
  data: T | undefined
  error: ApiError | null
  /** True while a subscription (not polling) keeps the data current. */
  live: boolean
  /** Read the data again now (a `reduce` subscription that owns it starts afresh instead). */
  refetch(): Promise<void>
}

/** Subscriptions the server refused, so later pages poll at once instead of asking again. */
const refused = new Set<string>()

/**
 * `query` is a GraphQL document, or a function that loads the data some other
 * way (several requests); give such a function a stable identity.
 */
export function useLive<T>(
  token: string,
  query: Document<T> | ((token: string) => Promise<T>),
  opts: LiveOptions<T> = {},
): Live<T> {
  const [data, setData] = useState<T | undefined>(undefined)
  const [error, setError] = useState<ApiError | null>(null)
  const [live, setLive] = useState(false)
  const [socket, setSocket] = useState(liveSocketUp)
  useEffect(() => {
    const stop = onSocketChange(setSocket)
    // The socket may have connected or dropped since the first render, before this listened.
    setSocket(liveSocketUp())
    return stop
  }, [])
  const varsKey = JSON.stringify(opts.variables ?? null)
  const subKey = opts.subscription
    ? print(opts.subscription.query) + JSON.stringify(opts.subscription.variables ?? null)
    : ''
  const optsRef = useRef(opts)
  optsRef.current = opts
  const generation = useRef(0)
  /** Set while a `reduce` subscription owns the data: subscribes afresh. */
  const resubscribe = useRef<(() => void) | null>(null)

  const refetch = useCallback(async () => {
    if (resubscribe.current) return resubscribe.current()
    const mine = generation.current
    try {
      const next =
        typeof query === 'function' ? await query(token) : await gql(token, query, optsRef.current.variables)
      // A change stream took the data over while this read was out: its answer is older.
      if (mine !== generation.current || resubscribe.current) return
      setData(next)
      setError(null)
    } catch (err) {
      if (mine !== generation.current) return
      setError(err instanceof ApiError ? err : new ApiError(String(err), undefined))
    }
  }, [token, query, varsKey])

  useEffect(() => {
    generation.current++
    setData(undefined)
    setError(null)
    let stopped = false
    let timer: ReturnType<typeof setTimeout> | undefined
    let debounce: ReturnType<typeof setTimeout> | undefined
    let subscribed = false
    const sub = optsRef.current.subscription
    const every = () => {
      const base = optsRef.current.pollMs ?? pollMs()
      // While the socket is down (blocked by a proxy, server restarting) nothing is pushed: poll at full rate.
      return subscribed && liveSocketUp() ? (optsRef.current.livePollMs ?? base * 10) : base
    }

    const loop = async () => {
      await refetch()
      if (stopped) return
      timer = setTimeout(loop, every())
    }
    const restartPolling = () => {
      clearTimeout(timer)
      if (!stopped) loop()
    }

    let unsubscribe = () => {}
    /** A subscription that sends whole data makes a first read redundant, unless it stays mute. */
    let awaitingFirstEvent = false
    /** Counts this effect's subscriptions, so a replaced one's late events are dropped. */
    let opened = 0
    /** What a `reduce` subscription's events made so far. */
    let held: T | undefined
    const open = () => {
      if (!sub) return
      unsubscribe()
      const mine = ++opened
      held = undefined
      unsubscribe = subscribe(token, sub.query, sub.variables, {
        next: (event) => {
          if (stopped || mine !== opened) return
          if (sub.reduce) {
            const next = sub.reduce(held, event)
            // A change relative to nothing this page holds: start again from the whole data.
            if (next === null) return void setTimeout(() => !stopped && mine === opened && open(), 0)
            held = next
            resubscribe.current = () => open()
            setData(next)
            setError(null)
            firstEventArrived()
            return
          }
          const applied = sub.apply?.(event) ?? null
          if (applied !== null) {
            setData(applied)
            setError(null)
            firstEventArrived()
            return
          }
          // Many changes in a burst cost one refetch, at most every 100 ms.
          debounce ??= setTimeout(() => {
            debounce = undefined
            void refetch()
          }, 100)
        },
        unsupported: () => {
          if (stopped || !subscribed || mine !== opened) return
          refused.add(subKey)
          subscribed = false
          resubscribe.current = null
          setLive(false)
          restartPolling()
        },
      })
    }
    const firstEventArrived = () => {
      if (!awaitingFirstEvent) return
      // The subscription answered: the fallback read is not needed; poll slowly from here.
      awaitingFirstEvent = false
      clearTimeout(timer)
      timer = setTimeout(loop, every())
    }
    if (sub && !refused.has(subKey)) {
      subscribed = true
      setLive(true)
      open()
    } else {
      setLive(false)
    }
    // A subscription that sends the whole data at once makes a first read redundant;
    // read anyway if it has said nothing soon (a socket a proxy holds open but mute).
    awaitingFirstEvent = subscribed && (sub?.apply !== undefined || sub?.reduce !== undefined)
    if (awaitingFirstEvent) timer = setTimeout(loop, 1500)
    else loop()
    // A socket that drops hands over to polling at once; one that comes back lets polling slow down.
    const stopListening = onSocketChange((up) => {
      if (stopped || !subscribed) return
      // Down, a change stream owns nothing: polls show the data until it starts again whole.
      if (!up) resubscribe.current = null
      clearTimeout(timer)
      if (up) timer = setTimeout(loop, every())
      else loop()
    })
    return () => {
      stopListening()
      stopped = true
      resubscribe.current = null
      clearTimeout(timer)
      clearTimeout(debounce)
      unsubscribe()
    }
  }, [token, query, varsKey, subKey])

  return { data, error, live: live && socket, refetch }
}

/** Re-render every `ms` so "waited 3 min" keeps counting. */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now())
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms)
    return () => clearInterval(t)
  }, [ms])
  return now
}
