/**
 * The one poller behind every `waitingSteps` subscription in this process: the
 * cue inbox, read once per interval for all subscribers together.
 *
 * A poll is one read of the inbox, oldest cue first, as long as the longest
 * `limit` any subscriber asked for (at most 500): a range of the waiting-steps
 * index, so its cost follows the inbox, not the history. `mine` subscribers
 * are grouped by who they are; every group's own inbox (filtered before its
 * limit) is read by the same statement, beside everybody's. Each subscriber
 * gets its first `limit` cues again whenever they differ from what it got last
 * (a cue parked, answered, skipped or timed out). The runs of the changed
 * inboxes are read once per poll for all of them, so `run { … }` in 2,000
 * subscriptions, or in ten operators' inboxes, costs one read, not one each.
 * Nobody listening costs nothing.
 */
import { Repeater, SlidingBuffer } from 'graphql-yoga'
import { listWaiting, listWaitingForEach } from '../../sql/cueLadders.ts'
import type { Queryable } from '../../sql/db.ts'
import { getByIds } from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import type { Logger } from '../log.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import { PollLoop } from './pollLoop.ts'

/** Longest inbox a subscriber can ask for. */
export const MAX_INBOX = 500

/**
 * What a `waitingSteps` subscriber receives: the cues, and the DataLoaders its
 * nested fields resolve with, already holding the cues' runs. One set per poll,
 * shared by every subscriber it reaches (see RunChange in runChangeFeed.ts).
 */
export interface Inbox {
  steps: StepRow[]
  loaders: Loaders
}

interface InboxListener {
  limit: number
  /** `mine`: the caller's name and teams (see src/api/person.ts); null = everybody's cues. */
  identities: string[] | null
  /** What this listener got last. */
  sent: string
  onInbox(inbox: Inbox): void
  onClose(): void
}

/** Options of {@link InboxFeed}. */
export interface InboxFeedOptions {
  db: Queryable
  /** Milliseconds between polls. @default 500 */
  intervalMs?: number
  logger?: Pick<Logger, 'warn'>
  /** Called when a subscriber starts (+1) and ends (−1): the open-subscriptions gauge. */
  onWatchersChange?: (delta: 1 | -1) => void
}

/** One limit's cut of an inbox as a poll read it: its cues, their fingerprint, and the event sent for them. */
interface View {
  steps: StepRow[]
  sent: string
  inbox?: Inbox
}

/** Identifies the inbox's content: which cues, each as of its last change. */
function fingerprintOf(steps: readonly StepRow[]): string {
  return steps.map((s) => `${s.id}@${s.updatedAt.getTime()}`).join(',')
}

export class InboxFeed {
  private readonly listeners = new Set<InboxListener>()
  private readonly loop: PollLoop
  private closed = false
  /** The first-inbox read that subscribers joining now share (see {@link watch}). */
  private firstRead: Promise<Inbox> | null = null

  constructor(private readonly opts: InboxFeedOptions) {
    this.loop = new PollLoop({
      intervalMs: opts.intervalMs ?? 500,
      poll: () => this.poll(),
      hasListeners: () => this.listeners.size > 0,
      onError: (err) => opts.logger?.warn({ err }, 'waitingSteps poll failed; retrying at the next interval'),
    })
  }

  get listenerCount(): number {
    return this.listeners.size
  }

  get polls(): number {
    return this.loop.polls
  }

  /** Something changed in this process: look now rather than at the next interval. */
  wake(): void {
    this.loop.wake()
  }

  /** The first `limit` cues and their runs, read now. */
  async read(limit: number, identities: string[] | null = null): Promise<Inbox> {
    const steps = await listWaiting(this.opts.db, limit, identities)
    return { steps, loaders: await this.loadersFor(steps) }
  }

  /**
   * The `waitingSteps` stream: the inbox at once, then the whole inbox again on
   * each change. Only the newest inbox matters to a slow consumer.
   */
  async watch(limit: number, identities: string[] | null = null): Promise<AsyncIterableIterator<Inbox>> {
    const n = Math.min(Math.max(1, Math.trunc(limit)), MAX_INBOX)
    if (identities !== null) return this.watchMine(n, identities)
    // Read before the stream opens, so a database error refuses the subscription.
    // Subscribers that join together (a console reconnecting, a dashboard of
    // many panes) share one read of the longest inbox instead of a read each,
    // which would queue thousands of statements on the API's pool.
    this.firstRead ??= this.read(MAX_INBOX).finally(() => {
      this.firstRead = null
    })
    const shared = await this.firstRead
    const first = { steps: shared.steps.slice(0, n), loaders: shared.loaders }
    return this.stream(first, n, null)
  }

  /** `mine`: a stream of its own, read for this caller's identities (rarely many per process). */
  private async watchMine(n: number, identities: string[]): Promise<AsyncIterableIterator<Inbox>> {
    const first = await this.read(n, identities)
    return this.stream(first, n, identities)
  }

  /**
   * A subscriber's stream: `first` at once, then each changed inbox for its
   * limit and identities (null: everybody's), until it stops or the feed closes.
   */
  private stream(first: Inbox, limit: number, identities: string[] | null): AsyncIterableIterator<Inbox> {
    return new Repeater<Inbox>(async (push, stop) => {
      const unlisten = this.listen({
        limit,
        identities,
        sent: fingerprintOf(first.steps),
        onInbox: (inbox) => {
          push(inbox).catch(() => {})
        },
        onClose: () => stop(),
      })
      this.opts.onWatchersChange?.(1)
      try {
        await push(first)
        await stop
      } finally {
        unlisten()
        this.opts.onWatchersChange?.(-1)
      }
    }, new SlidingBuffer(1))
  }

  async close(): Promise<void> {
    this.closed = true
    const all = [...this.listeners]
    this.listeners.clear()
    for (const l of all) l.onClose()
    await this.loop.close()
  }

  private listen(listener: InboxListener): () => void {
    if (this.closed) {
      listener.onClose()
      return () => {}
    }
    this.listeners.add(listener)
    this.loop.ensure()
    return () => {
      this.listeners.delete(listener)
      this.loop.idle()
    }
  }

  /** Fresh loaders holding the runs of `steps` (one statement for all of them). */
  private async loadersFor(steps: readonly StepRow[]): Promise<Loaders> {
    const loaders = createLoaders(this.opts.db)
    const ids = [...new Set(steps.map((s) => s.runId))]
    if (ids.length > 0) loaders.rememberRuns(await getByIds(this.opts.db, ids))
    return loaders
  }

  private async poll(): Promise<void> {
    const all = [...this.listeners]
    if (all.length === 0) return
    // Everybody's inbox is read once; each distinct `mine` caller's once more.
    const groups = new Map<string, InboxListener[]>()
    for (const l of all) {
      const key = l.identities === null ? '' : JSON.stringify(l.identities)
      const group = groups.get(key)
      if (group) group.push(l)
      else groups.set(key, [l])
    }
    const everybody = groups.get('')
    const mine = [...groups.values()].filter((g) => g !== everybody)
    const longest = (listeners: InboxListener[]) => Math.max(...listeners.map((l) => l.limit))
    // Every caller's inbox in one statement (per 16 callers), beside everybody's:
    // read one after another, ten operators' inboxes were ten round trips on a
    // loaded pool, and the last operator's new cue waited for all of them.
    const [everybodySteps, mineSteps] = await Promise.all([
      everybody ? listWaiting(this.opts.db, longest(everybody), null) : [],
      listWaitingForEach(
        this.opts.db,
        mine.map((g) => ({ limit: longest(g), identities: g[0]?.identities ?? [] })),
      ),
    ])
    const read: { listeners: InboxListener[]; steps: StepRow[] }[] = mine.map((listeners, i) => ({
      listeners,
      steps: mineSteps[i] ?? [],
    }))
    if (everybody) read.push({ listeners: everybody, steps: everybodySteps })
    const changed = read
      .map((r) => ({ ...r, due: this.dueOf(r.listeners, r.steps) }))
      .filter((r) => r.due.length > 0)
    if (changed.length === 0) return
    // The runs of every changed inbox in one read, and one set of loaders for
    // all of them, so `run { definition { … } }` is one statement per poll too.
    const loaders = await this.loadersFor(changed.flatMap((r) => r.steps))
    for (const { due } of changed) {
      for (const { listener, view } of due) {
        listener.sent = view.sent
        // One inbox object per limit: subscribers of equal selections share its
        // execution (sharedSubscribe.ts), which is keyed by the event object.
        view.inbox ??= { steps: view.steps, loaders }
        try {
          listener.onInbox(view.inbox)
        } catch (err) {
          this.opts.logger?.warn({ err }, 'a waitingSteps listener failed')
        }
      }
    }
  }

  /** The listeners of one inbox whose first `limit` cues differ from what they got last, each with its view. */
  private dueOf(listeners: InboxListener[], steps: StepRow[]): { listener: InboxListener; view: View }[] {
    const due: { listener: InboxListener; view: View }[] = []
    // Subscribers ask for a few distinct limits: each slice is cut and identified once.
    const byLimit = new Map<number, View>()
    for (const listener of listeners) {
      let view = byLimit.get(listener.limit)
      if (!view) {
        const slice = steps.slice(0, listener.limit)
        view = { steps: slice, sent: fingerprintOf(slice) }
        byLimit.set(listener.limit, view)
      }
      if (view.sent !== listener.sent) due.push({ listener, view })
    }
    return due
  }
}
