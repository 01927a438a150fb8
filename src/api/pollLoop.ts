/**
 * The timing shared by the live feeds (run changes, the cue inbox): one poll
 * per interval while anybody listens, none when nobody does, never two at once,
 * and an early poll when this process knows something just changed.
 *
 * `wake()` is how a change made here (a mutation, this instance's runner) is
 * pushed without waiting out the interval. Wakes are coalesced: a burst of
 * them costs one poll (or one more right after the poll in flight), and polls
 * never come closer together than `minGapMs`, so a busy instance polls at most
 * once per gap however many changes it makes. A wake may also allow some time
 * (`wake(withinMs)`): the poll comes no later than that, sooner if another wake
 * or the interval asks, so frequent changes that are not urgent share polls.
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
  /** When the poll after the one in flight is due (epoch ms); null: none asked for. */
  private againAt: number | null = null
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

  /**
   * Something changed in this process: poll as soon as the gap allows, or
   * within `withinMs` when the change can wait that long.
   */
  wake(withinMs = 0): void {
    if (this.closed || !this.opts.hasListeners()) return
    const now = Date.now()
    const due = Math.max(now + Math.max(0, withinMs), this.lastStart + this.minGapMs)
    if (this.inFlight) {
      this.againAt = this.againAt === null ? due : Math.min(this.againAt, due)
      return
    }
    if (this.timer && this.timerDue <= due) return
    this.clearTimer()
    this.schedule(due - now)
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
    this.againAt = null
    this.lastStart = Date.now()
    this.polls++
    this.inFlight = this.opts
      .poll()
      .catch((err) => this.opts.onError?.(err))
      .finally(() => {
        this.inFlight = null
        const againAt = this.againAt
        this.againAt = null
        const now = Date.now()
        this.schedule(
          againAt === null
            ? this.opts.intervalMs
            : Math.max(0, againAt - now, this.lastStart + this.minGapMs - now),
        )
      })
  }
}
