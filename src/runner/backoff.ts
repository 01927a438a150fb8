/**
 * Retry delays for failed step attempts: exponential doubling from the step's
 * base, with jitter so that many runs failing against one webhook at once do not
 * retry in lock-step.
 */

/** Options of {@link retryDelayMs}. */
export interface RetryDelayOptions {
  /**
   * Longest delay before jitter. A base larger than the cap is kept as it is
   * (a step asking for `backoffSeconds: 300` waits 5 minutes, not 60 s).
   * @default 60000
   */
  capMs?: number
  /**
   * `equal`: half the delay fixed, half random, so a retry never comes sooner
   * than half the computed delay. `full`: anywhere from 0 to the delay.
   * @default 'equal'
   */
  jitter?: 'equal' | 'full'
  /** A source of numbers in [0, 1); tests inject a fixed one. @default Math.random */
  random?: () => number
}

/**
 * Milliseconds to wait after failed attempt number `attempt` (1-based) before
 * the next one: `baseMs · 2^(attempt-1)`, capped, then jittered.
 */
export function retryDelayMs(attempt: number, baseMs: number, opts: RetryDelayOptions = {}): number {
  const { capMs = 60_000, jitter = 'equal', random = Math.random } = opts
  if (!(baseMs > 0)) return 0
  const n = Number.isFinite(attempt) ? Math.max(1, Math.floor(attempt)) : 1
  const cap = Math.max(capMs, baseMs)
  // 2 ** 1000 is Infinity, which Math.min turns into the cap: no overflow to handle.
  const delay = Math.min(cap, baseMs * 2 ** (n - 1))
  const r = Math.min(Math.max(random(), 0), 1)
  return Math.round(jitter === 'full' ? delay * r : delay / 2 + (delay / 2) * r)
}

/**
 * Cap on the runner's wait after failed ticks. Short enough that a runner
 * notices a restarted database within seconds, long enough not to hammer one
 * that is down.
 */
export const MAX_TICK_BACKOFF_MS = 5_000

/**
 * The runner's wait after `consecutiveErrors` failed ticks in a row (≥ 1):
 * the tick doubled per failure, capped at {@link MAX_TICK_BACKOFF_MS} (or at
 * the tick itself, when a tick is longer than that).
 */
export function tickBackoffMs(tickMs: number, consecutiveErrors: number): number {
  return Math.min(tickMs * 2 ** consecutiveErrors, Math.max(MAX_TICK_BACKOFF_MS, tickMs))
}
