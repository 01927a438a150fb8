/**
 * The one poller behind every `waitingSteps` subscription in this process: the
 * cue inbox, read once per interval for all subscribers together.
 *
 * A poll reads the waiting cues once for everybody, oldest first, with whom
 * each is for and its run (`WaitingCueReader`: narrow, then in full only
 * what changed since the last poll), as many as the longest `limit` asked
 * for, or up to {@link WAITING_READ_LIMIT} when callers watch their own
 * (`mine`). Each caller's inbox is cut from those rows (filtered before its
 * limit, so nobody's new cue waits behind others' older ones); a caller whose
 * inbox is not full from them while more cues wait beyond reads its own. Each
 * subscriber gets its first `limit` cues again whenever they differ from what
 * it got last (a cue parked, answered, skipped or timed out), with one set of
 * loaders holding the runs the poll read, so `run { … }` in 2,000
 * subscriptions, or in ten operators' inboxes, costs no statement more.
 * Nobody listening costs nothing.
 */
import { Repeater, SlidingBuffer } from 'graphql-yoga'
import { listWaiting, listWaitingForEach } from '../../sql/cueLadders.ts'
import type { Db } from '../../sql/db.ts'
import { getByIds } from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import { isFor } from '../../sql/waitingCues.ts'
import type { Logger } from '../log.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import { PollLoop } from './pollLoop.ts'
import { WaitingCueReader } from './waitingCueReader.ts'

/** Longest inbox a subscriber can ask for. */
export const MAX_INBOX = 500

/**
 * How long a change that brings no new cue (an answer, a skip) may wait to
 * leave the inboxes: under a stream of answers, polls are shared instead of
 * one per answer, each re-sending every changed inbox whole. A cue the runner
 * parks is pushed at once.
 */
export const INBOX_SETTLE_MS = 200

/**
 * Least time between the starts of two inbox polls, however many cues park.
 * In a show, cues park a few at a time for seconds on end: polls as close
 * as the live feeds' usual 25 ms took CPU from the runner (GO p99 20–50 ms
 * later) and each found only a cue or two; at this gap a poll finds them
 * together and a cue still reaches its person sooner than behind the API.
 */
export const INBOX_MIN_GAP_MS = 100

/**
 * Waiting cues a poll reads at most when callers watch their own inboxes.
 * Beyond it, a caller whose inbox is not full from these reads its own
 * (ten stage managers each with 500 cues of their own fit).
 */
export const WAITING_READ_LIMIT = 10 * MAX_INBOX

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
  db: Db
  /**
   * Where the polls read: a connection of their own, so a parked cue's poll
   * does not queue behind the API's requests. First reads for new
   * subscribers stay on `db`. @default db
   */
  pollDb?: Db
  /** Milliseconds between polls. @default 500 */
  intervalMs?: number
  logger?: Pick<Logger, 'warn'>
  /** Called when a subscriber starts (+1) and ends (−1): the open-subscriptions gauge. */
  onWatchersChange?: (delta: 1 | -1) => void
  /** Waiting cues a poll reads at most for `mine` callers. @default {@link WAITING_READ_LIMIT} */
  waitingReadLimit?: number
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
  /** The polls' reads of the waiting cues, with the copies they keep. */
  readonly waitingCues = new WaitingCueReader()

  constructor(private readonly opts: InboxFeedOptions) {
    this.loop = new PollLoop({
      intervalMs: opts.intervalMs ?? 500,
      minGapMs: Math.min(INBOX_MIN_GAP_MS, opts.intervalMs ?? 500),
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

  /** Something changed in this process: look now (or within `withinMs`) rather than at the next interval. */
  wake(withinMs = 0): void {
    this.loop.wake(withinMs)
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
    // Listeners grouped by whose inbox they watch: everybody's (key ''), or one `mine` caller's.
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
    // One read of the waiting cues serves every inbox: each caller's is cut
    // from it here. Read per caller, each caller's part walked the whole
    // waiting-cue index again, and the runs cost two more statements naming
    // every run. The poll's statements share one connection: its own
    // (pollDb), so a parked cue's poll does not queue behind the API.
    const read = await (this.opts.pollDb ?? this.opts.db).withConnection(async (tx) => {
      const waiting = await this.waitingCues.read(
        tx,
        mine.length > 0 ? (this.opts.waitingReadLimit ?? WAITING_READ_LIMIT) : longest(everybody ?? []),
      )
      const inboxes: { listeners: InboxListener[]; steps: StepRow[] }[] = []
      const beyondRead: InboxListener[][] = []
      for (const listeners of mine) {
        const limit = longest(listeners)
        const identities = new Set(listeners[0]?.identities ?? [])
        const steps: StepRow[] = []
        for (const cue of waiting.cues) {
          if (steps.length === limit) break
          if (isFor(cue.assignees, identities)) steps.push(cue.step)
        }
        // More cues wait than were read, and this caller's are not all among them: its own read.
        if (steps.length < limit && !waiting.complete) beyondRead.push(listeners)
        else inboxes.push({ listeners, steps })
      }
      const runs = [...waiting.runs]
      if (beyondRead.length > 0) {
        const own = await listWaitingForEach(
          tx,
          beyondRead.map((g) => ({ limit: longest(g), identities: g[0]?.identities ?? [] })),
        )
        for (const [i, listeners] of beyondRead.entries()) inboxes.push({ listeners, steps: own[i] ?? [] })
        const known = new Set(runs.map((r) => r.id))
        const missing = [...new Set(own.flat().map((s) => s.runId))].filter((id) => !known.has(id))
        runs.push(...(await getByIds(tx, missing)))
      }
      if (everybody) {
        inboxes.push({
          listeners: everybody,
          steps: waiting.cues.slice(0, longest(everybody)).map((c) => c.step),
        })
      }
      return { inboxes, runs }
    })
    const changed = read.inboxes
      .map((r) => ({ ...r, due: this.dueOf(r.listeners, r.steps) }))
      .filter((r) => r.due.length > 0)
    if (changed.length === 0) return
    // One set of loaders for every changed inbox, holding the runs the poll
    // read, so `run { definition { … } }` costs no statement per inbox. What
    // they still read (the runs' definitions) goes on the poll's connection:
    // on the API's pool it queued behind the operators' answers, and the
    // inbox reached them 0.3–0.9 s after the poll had read it.
    const loaders = createLoaders(this.opts.pollDb ?? this.opts.db)
    loaders.rememberRuns(read.runs)
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
