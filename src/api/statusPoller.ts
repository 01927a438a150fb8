/**
 * The one poller behind every `runStatus` subscription in this process.
 *
 * Subscribers register a listener per run id; every `intervalMs` the poller
 * reads the live fields of ALL watched runs in one `statusesOf` statement
 * (chunked only beyond 1000 ids) and hands each listener its run's snapshot.
 * So the database sees one query per interval per instance, however many
 * dashboards watch, and none at all when nobody does: the timer stops with the
 * last listener and starts again with the next one.
 *
 * The timing is the other feeds' (pollLoop.ts): polls never overlap, the next
 * one is scheduled when the previous finishes, and the loop is idle while
 * nobody watches. A failed poll (database down) is logged and retried at the
 * next interval; subscribers simply see no change until it answers again.
 */
import { Repeater, SlidingBuffer } from 'graphql-yoga'
import type { Queryable } from '../../sql/db.ts'
import { type RunStatusSnapshot, statusesOf } from '../../sql/eventRuns/index.ts'
import { isTerminal } from '../../sql/states.ts'
import type { Logger } from '../log.ts'
import { PollLoop } from './pollLoop.ts'

/** Ids per statement: keeps the IN list and the packet bounded. */
export const POLL_CHUNK = 1000

export interface StatusListener {
  /** The run's latest snapshot, or null when the run no longer exists. */
  onSnapshot(snapshot: RunStatusSnapshot | null): void
  /** The poller is shutting down: finish. */
  onClose(): void
}

/** Options of {@link StatusPoller}. */
export interface StatusPollerOptions {
  db: Queryable
  /** Milliseconds between polls. @default 500 */
  intervalMs?: number
  logger?: Pick<Logger, 'warn'>
  /** Called when a watcher starts (+1) and ends (−1): the open-subscriptions gauge. */
  onWatchersChange?: (delta: 1 | -1) => void
}

/** True when a subscriber should hear about `next` after having seen `prev`. */
export function statusChanged(prev: RunStatusSnapshot, next: RunStatusSnapshot): boolean {
  return (
    prev.status !== next.status ||
    prev.health !== next.health ||
    prev.currentPhase !== next.currentPhase ||
    prev.waitingSteps !== next.waitingSteps ||
    prev.updatedAt.getTime() !== next.updatedAt.getTime()
  )
}

export class StatusPoller {
  private readonly listeners = new Map<number, Set<StatusListener>>()
  private readonly loop: PollLoop
  private closed = false
  /** Status statements issued since creation (tests compare it with the statement counter). */
  polls = 0

  constructor(private readonly opts: StatusPollerOptions) {
    this.loop = new PollLoop({
      intervalMs: opts.intervalMs ?? 500,
      poll: () => this.poll(),
      hasListeners: () => this.listeners.size > 0,
    })
  }

  /** Runs watched right now. */
  get runCount(): number {
    return this.listeners.size
  }

  /** Listeners registered right now, over all runs. */
  get listenerCount(): number {
    let n = 0
    for (const set of this.listeners.values()) n += set.size
    return n
  }

  /** Watch one run; answers the function that stops watching. */
  listen(runId: number, listener: StatusListener): () => void {
    if (this.closed) {
      listener.onClose()
      return () => {}
    }
    let set = this.listeners.get(runId)
    if (!set) {
      set = new Set()
      this.listeners.set(runId, set)
    }
    set.add(listener)
    this.loop.ensure()
    return () => this.remove(runId, listener)
  }

  /**
   * An async iterator of a run's snapshots for the `runStatus` subscription:
   * `initial` at once, then each change, ending after a terminal status, when
   * the run disappears, or when the poller closes. Ending the iterator early
   * (the client unsubscribed) stops watching.
   */
  watch(initial: RunStatusSnapshot): AsyncIterableIterator<RunStatusSnapshot> {
    // Only the newest states matter to a slow consumer, but the terminal one
    // is always the last pushed, so a sliding buffer never loses it.
    return new Repeater<RunStatusSnapshot>(async (push, stop) => {
      this.opts.onWatchersChange?.(1)
      try {
        await push(initial)
        if (isTerminal(initial.status)) {
          stop()
          return
        }
        let last = initial
        const unlisten = this.listen(initial.id, {
          onSnapshot: (snapshot) => {
            if (snapshot === null) {
              stop()
              return
            }
            if (!statusChanged(last, snapshot)) return
            last = snapshot
            push(snapshot).catch(() => {})
            if (isTerminal(snapshot.status)) stop()
          },
          onClose: () => stop(),
        })
        await stop
        unlisten()
      } finally {
        this.opts.onWatchersChange?.(-1)
      }
    }, new SlidingBuffer(16))
  }

  /** Stop polling and end every watcher (server shutdown). Waits for a poll in flight. */
  async close(): Promise<void> {
    this.closed = true
    const closing = this.loop.close()
    const all = [...this.listeners.values()].flatMap((set) => [...set])
    this.listeners.clear()
    for (const l of all) l.onClose()
    await closing
  }

  private remove(runId: number, listener: StatusListener): void {
    const set = this.listeners.get(runId)
    if (!set) return
    set.delete(listener)
    if (set.size === 0) this.listeners.delete(runId)
    this.loop.idle()
  }

  private async poll(): Promise<void> {
    const ids = [...this.listeners.keys()]
    if (ids.length === 0) return
    for (let i = 0; i < ids.length; i += POLL_CHUNK) {
      const chunk = ids.slice(i, i + POLL_CHUNK)
      let rows: RunStatusSnapshot[]
      try {
        this.polls++
        rows = await statusesOf(this.opts.db, chunk)
      } catch (err) {
        this.opts.logger?.warn(
          { err, runs: chunk.length },
          'runStatus poll failed; retrying at the next interval',
        )
        continue
      }
      const byId = new Map(rows.map((r) => [r.id, r]))
      for (const id of chunk) {
        const set = this.listeners.get(id)
        if (!set) continue
        const snapshot = byId.get(id) ?? null
        for (const listener of [...set]) {
          try {
            listener.onSnapshot(snapshot)
          } catch (err) {
            this.opts.logger?.warn({ err, runId: id }, 'a runStatus listener failed')
          }
        }
      }
    }
  }
}
