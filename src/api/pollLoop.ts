/**
 * The timing shared by the live feeds (run changes, the cue inbox): one poll
 * per interval while anybody listens, none when nobody does, never two at once,
 * and an early poll when this process knows something just changed.
 *
 * `wake()` is how a change made here (a mutation, this instance's runner) is
 * pushed without waiting out the interval. Wakes are coalesced: a burst of
 * them costs one poll (or one more right after the poll in flight), and polls
 * never come closer together than `minGapMs`, so a busy instance polls at most
 * once per gap however many changes it makes.
 */

/** Options of {@link PollLoop}. */
export interface PollLoopOptions {
  /** Milliseconds between polls while nothing wakes the loop. */
  intervalMs: number
  /** Least time between the starts of two polls, woken or not. @default min(25, intervalMs) */
  minGapMs?: number
  /** One poll. Errors are the caller's to log; the loop carries on at the next interval. */
  poll: () => Promise<void>
  /** Whether anybody listens; the loop is idle while this is false. */
  hasListeners: () => boolean
  onError?: (err: unknown) => void
}

export class PollLoop {
  private timer: NodeJS.Timeout | null = null
  /** When the pending timer fires (epoch ms). */
  private timerDue = 0
  private inFlight: Promise<void> | null = null
  private again = false
  private closed = false
  private lastStart = 0
  private readonly minGapMs: number
  /** Polls started since creation (tests compare it with statement counts). */
  polls = 0

  constructor(private readonly opts: PollLoopOptions) {
    this.minGapMs = opts.minGapMs ?? Math.min(25, opts.intervalMs)
  }

  /** A listener arrived: make sure the next poll is scheduled. */
  ensure(): void {
    this.schedule(this.opts.intervalMs)
  }

  /** Something changed in this process: poll as soon as the gap allows. */
  wake(): void {
    if (this.closed || !this.opts.hasListeners()) return
    if (this.inFlight) {
      this.again = true
      return
    }
    const delay = Math.max(0, this.lastStart + this.minGapMs - Date.now())
    if (this.timer && this.timerDue <= Date.now() + delay) return
    this.clearTimer()
    this.schedule(delay)
  }

  /** The last listener left: drop the pending poll (one in flight finishes). */
  idle(): void {
    if (!this.opts.hasListeners()) this.clearTimer()
  }

  /** Stop for good; waits for a poll in flight. */
  async close(): Promise<void> {
    this.closed = true
    this.clearTimer()
    await this.inFlight
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
  }

  private schedule(delay: number): void {
    if (this.closed || this.timer || this.inFlight || !this.opts.hasListeners()) return
    this.timerDue = Date.now() + delay
    this.timer = setTimeout(() => this.run(), delay)
    // A process with only listeners left should still be able to exit.
    this.timer.unref?.()
  }

  private run(): void {
    this.timer = null
    this.again = false
    this.lastStart = Date.now()
    this.polls++
    this.inFlight = this.opts
      .poll()
      .catch((err) => this.opts.onError?.(err))
      .finally(() => {
        this.inFlight = null
        const again = this.again
        this.again = false
        this.schedule(again ? Math.max(0, this.lastStart + this.minGapMs - Date.now()) : this.opts.intervalMs)
      })
  }
}
