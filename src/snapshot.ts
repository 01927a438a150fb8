/**
 * A value read at most once per `maxAgeMs`, by at most one read at a time.
 *
 * `/metrics` and `/readyz` need no token, so anyone who can reach the port can
 * scrape them as fast as they like. Each answer used to cost statements on the
 * database; behind a snapshot a flood of scrapes costs one read per
 * `maxAgeMs`, however many arrive, and every caller in the meantime is served
 * the last value (or waits for the one read already under way).
 */
export interface Snapshot<T> {
  /** The current value: cached when fresh, else the one read in flight (started if none is). */
  get(): Promise<T>
  /** Forget the cached value (the next get() reads). */
  clear(): void
}

export function createSnapshot<T>(
  read: () => Promise<T>,
  maxAgeMs: number,
  now: () => number = Date.now,
): Snapshot<T> {
  let cached: { at: number; value: T } | null = null
  let inFlight: Promise<T> | null = null
  return {
    get() {
      if (cached && now() - cached.at < maxAgeMs) return Promise.resolve(cached.value)
      inFlight ??= (async () => {
        const at = now()
        const value = await read()
        cached = { at, value }
        return value
      })().finally(() => {
        inFlight = null
      })
      return inFlight
    },
    clear() {
      cached = null
    },
  }
}
