/**
 * Places for steps executing at once: a round's own (executor/round.ts), or
 * shared by several batches, as the chunks of one hand-off
 * (chunkedAdvance.ts) share `RUNNER_PARALLELISM` places.
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
  private readonly waiting: { rank: number; take: () => void }[] = []

  constructor(size: number) {
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
      // After every waiter of its rank or a lower one (they came first), before
      // any of a higher rank: an insertion from the end keeps the order.
      let at = this.waiting.length
      while (at > 0 && (this.waiting[at - 1] as { rank: number }).rank > rank) at--
      this.waiting.splice(at, 0, { rank, take })
    })
  }

  private release(): void {
    const next = this.waiting.shift()
    if (next) next.take()
    else this.free++
  }
}
