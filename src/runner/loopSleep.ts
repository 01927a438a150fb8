/**
 * The running loop's sleep between passes: a timer that a nudge ends at once
 * and a timer's release can bring forward, and that says how long it has left
 * (quietCollect.ts times a full collection by it, so the pause lands while
 * nothing is due).
 */
export class LoopSleep {
  /** The sleep in progress: when it ends (Date.now() ms), its timer, and how to end it. */
  private current: { untilMs: number; timer: ReturnType<typeof setTimeout>; done: () => void } | null = null

  /** How long the sleep has left (ms); 0 while awake. */
  get leftMs(): number {
    return this.current ? Math.max(0, this.current.untilMs - Date.now()) : 0
  }

  /** Sleep `ms`, or until {@link wake}. */
  async sleep(ms: number): Promise<void> {
    if (ms <= 0) return
    await new Promise<void>((resolve) => {
      const done = () => {
        if (this.current) clearTimeout(this.current.timer)
        this.current = null
        resolve()
      }
      this.current = { untilMs: Date.now() + ms, timer: setTimeout(done, ms), done }
    })
  }

  /** End the sleep in progress now (a nudge, a stop); nothing when awake. */
  wake(): void {
    this.current?.done()
  }

  /** End the sleep in progress within `inMs`, if it was to last longer. */
  endWithin(inMs: number): void {
    const current = this.current
    if (!current || Date.now() + inMs >= current.untilMs) return
    clearTimeout(current.timer)
    current.untilMs = Date.now() + inMs
    current.timer = setTimeout(current.done, inMs)
  }
}
