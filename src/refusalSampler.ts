/**
 * Refusals are recorded, but not one line or row each without bound: per key
 * (refused authentication, one actor's refused authorisations, …) the first
 * {@link REFUSALS_PER_WINDOW} in each minute are recorded and the rest
 * counted; the next one recorded carries `suppressed`, how many were left out
 * since the one before. A flood of 2,000 refused requests in a minute so
 * writes 10 log lines (or audit rows) saying so, not 2,000.
 */

export const REFUSALS_PER_WINDOW = 10
export const REFUSAL_WINDOW_MS = 60_000
/** Keys remembered at once (actors are few; this bounds a flood of distinct keys). */
const MAX_KEYS = 1000

interface Window {
  start: number
  recorded: number
  suppressed: number
}

export class RefusalSampler {
  private readonly windows = new Map<string, Window>()

  constructor(
    private readonly perWindow = REFUSALS_PER_WINDOW,
    private readonly windowMs = REFUSAL_WINDOW_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Whether to record this refusal: null to leave it out (it is counted), else
   * how many of `key` were left out since the last one recorded (0 usually).
   */
  take(key: string): number | null {
    const t = this.now()
    let w = this.windows.get(key)
    if (w === undefined || t - w.start >= this.windowMs) {
      const carried = w?.suppressed ?? 0
      if (w === undefined && this.windows.size >= MAX_KEYS) {
        const oldest = this.windows.keys().next().value
        if (oldest !== undefined) this.windows.delete(oldest)
      }
      w = { start: t, recorded: 0, suppressed: carried }
      this.windows.delete(key)
      this.windows.set(key, w)
    }
    if (w.recorded >= this.perWindow) {
      w.suppressed++
      return null
    }
    w.recorded++
    const suppressed = w.suppressed
    w.suppressed = 0
    return suppressed
  }
}

/** The process's sampler for refusal log lines and audit rows. */
export const refusals = new RefusalSampler()
