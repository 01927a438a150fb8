/**
 * How many changes the `runChanges` feed may hand to its subscribers per
 * second, all of them together: a token bucket refilled at `perSecond`,
 * holding at most one second's worth, so a quiet instance sends a burst at
 * once and a busy one at the rate.
 *
 * Why a pace, and why before a change is executed: the runner shares the
 * event loop with the fan-out, and at showtime (2,000 shows, 40 dashboards)
 * every change sent to every dashboard made GO and the show itself
 * measurably later. A change waiting for its turn is not executed yet, so it
 * folds into the run's newest state (runChangeFeed.ts): what a busy instance
 * sends late is never stale, and what it does not send costs nothing.
 */
export class DeliveryPace {
  private tokens: number
  private refilledAt: number

  constructor(
    private readonly perSecond: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = perSecond
    this.refilledAt = now()
  }

  /** Take one delivery: 0 when it may go now, else the milliseconds until one is free (nothing taken). */
  take(): number {
    const now = this.now()
    this.tokens = Math.min(this.perSecond, this.tokens + ((now - this.refilledAt) * this.perSecond) / 1000)
    this.refilledAt = now
    if (this.tokens >= 1) {
      this.tokens -= 1
      return 0
    }
    return Math.max(1, Math.ceil(((1 - this.tokens) * 1000) / this.perSecond))
  }
}
