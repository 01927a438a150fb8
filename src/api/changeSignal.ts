/**
 * "Something changed in this process": the in-process notice that lets the
 * live feeds push a change made here at once instead of at their next poll.
 * Mutations raise it after their writes (through the services' `nudge`), and
 * the co-hosted runner after a tick that advanced a run. Changes made by other
 * instances are not signalled; the feeds find them at their next poll.
 */
export class ChangeSignal {
  private readonly handlers = new Set<() => void>()

  /** Call `handler` on each notice; answers the function that stops it. */
  on(handler: () => void): () => void {
    this.handlers.add(handler)
    return () => this.handlers.delete(handler)
  }

  /** Tell every handler (each only schedules a poll; none throws). */
  notify(): void {
    for (const handler of this.handlers) handler()
  }
}
