/**
 * Places for steps executing at once, shared by several batches: the chunks
 * of one hand-off (chunkedAdvance.ts) share `RUNNER_PARALLELISM` places.
 * Waiting steps are served by their batch's rank, then first come, first
 * served, so the earliest-due chunk's calls go out first even when a later
 * chunk reached its round a moment sooner, and each chunk moves on as soon
 * as its own steps are done.
 */

/** One batch's way to the shared places; `executeRound` takes it. */
export interface SlotLane {
  /** Resolves once a place is this caller's; give it back with {@link release}. */
  acquire(): Promise<void>
  release(): void
}

export class StepSlots {
  private free: number
  private readonly waiting: { rank: number; seq: number; take: () => void }[] = []
  private seq = 0

  constructor(readonly size: number) {
    this.free = Math.max(1, size)
  }

  /** The way in for a batch of `rank` (lower goes first). */
  lane(rank: number): SlotLane {
    return { acquire: () => this.acquire(rank), release: () => this.release() }
  }

  private acquire(rank: number): Promise<void> {
    if (this.free > 0) {
      this.free--
      return Promise.resolve()
    }
    return new Promise((take) => {
      const entry = { rank, seq: this.seq++, take }
      // A few dozen waiters at most per chunk: an insertion keeps them in order.
      let at = this.waiting.length
      while (at > 0) {
        const before = this.waiting[at - 1] as { rank: number; seq: number }
        if (before.rank < rank || (before.rank === rank && before.seq < entry.seq)) break
        at--
      }
      this.waiting.splice(at, 0, entry)
    })
  }

  private release(): void {
    const next = this.waiting.shift()
    if (next) next.take()
    else this.free++
  }
}
