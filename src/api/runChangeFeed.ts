/**
 * The one poller behind every `runChanges` subscription in this process.
 *
 * Each interval it asks the database one question for all subscribers: which
 * runs changed since the last answer (`updated_at` past a watermark, a range
 * of idx_evrun_updated). A run counts as changed for subscribers when its
 * status, health, phase or waiting-cue count differs from what the feed last
 * saw; a claim renewal or a new wake time moves `updated_at` but is not news.
 * Only when a changed run matches some subscriber's filter are the changed
 * runs read whole (by primary key) and handed out. So 2,000 subscribers cost
 * what one does, and nobody listening costs nothing: the loop stops with the
 * last subscriber and the feed forgets what it saw.
 *
 * The watermark is the newest `updated_at` seen (the database's clock, which
 * stamps every update), and each read reaches back {@link CHANGE_OVERLAP_MS}
 * before it: a transaction that committed late, with an `updated_at` older
 * than rows already read, is still found. Rows read again are compared with
 * what was seen, so nothing is reported twice.
 *
 * What a subscriber starts from: the feed's baseline, taken when the first
 * subscriber arrives (the runs in progress, and the runs changed in the last
 * moments, as they are now); only changes after it are reported. A run the
 * feed has not seen before (new, or untouched since before the baseline) is
 * reported when it next changes at all. A run that leaves a filter (its status
 * moves out of `statuses`) is reported to it once more, with the new state, so
 * a list can drop it.
 *
 * The work a poll starts is bounded: a changed run may go to every subscriber,
 * so a poll reads at most `deliveriesPerPoll / subscribers` changed runs (at
 * least {@link MIN_ROWS_PER_POLL}) and leaves the rest, in order, for the
 * poll one interval later, however often the loop is woken meanwhile. A flood
 * (a per-second schedule materialising its window of runs ahead) is reported
 * whole, each run once to each subscriber, spread over intervals instead of
 * handed to every subscriber at once on the loop the runner shares.
 */
import { Repeater } from 'graphql-yoga'
import type { Queryable } from '../../sql/db.ts'
import { getByIds, type RunListRow } from '../../sql/eventRuns/index.ts'
import { changeBaseline, changedSince, type RunChangeRow } from '../../sql/runPage.ts'
import { isTerminal, type RunStatus } from '../../sql/states.ts'
import type { Logger } from '../log.ts'
import { DeliveryPace } from './deliveryPace.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import { PollLoop } from './pollLoop.ts'
import { matchesFilter, type RunFilter } from './runFilter.ts'

/** How far before the watermark each read reaches, for transactions that commit late. */
export const CHANGE_OVERLAP_MS = 1000
/** Changed rows per statement. */
const CHANGE_PAGE = 1000
/** Statements per poll at most; a larger burst is read on at the next poll. */
const MAX_PAGES_PER_POLL = 5
/** Runs remembered at most; past it, finished runs (then the oldest) are forgotten. */
const MAX_REMEMBERED = 50_000
/** Changes waiting for a slow subscriber at most (one per run; the oldest go first). */
const MAX_PENDING = 1000
/** Runs read whole per statement. */
const FETCH_CHUNK = 1000
/** Changed runs a poll reads at least, however many listen, so a flood drains in bounded time. */
const MIN_ROWS_PER_POLL = 50
/**
 * Least time between two polls, however often this process's changes wake the
 * feed. At showtime the changes never stop: polled at every wake (25 ms
 * apart), a run's states a moment apart each went to every dashboard, and
 * that fan-out took the runner's CPU. Four times a second is live to a person.
 */
export const CHANGES_MIN_GAP_MS = 250
/** Deliveries (changed runs × subscribers) one poll starts at most, by default (FANOUT_DELIVERIES_PER_POLL). */
export const DEFAULT_DELIVERIES_PER_POLL = 20_000

/**
 * One change as subscribers receive it: the whole run as it is now, and the
 * DataLoaders every subscriber of this poll's changes resolves nested fields
 * (`definition`, `steps`, …) with. Shared, so 2,000 subscribers selecting
 * `definition { title }` cost one statement, not 2,000; made fresh per poll, so
 * nothing is older than the change. Rows are the same for every caller (roles
 * decide what one may do, never which rows one sees), so sharing leaks nothing.
 */
export interface RunChange {
  run: RunListRow
  loaders: Loaders
}

export interface RunChangeListener {
  filter: RunFilter
  /** A matching run changed. */
  onChange(change: RunChange): void
  /** The feed is shutting down: finish. */
  onClose(): void
}

/** Options of {@link RunChangeFeed}. */
export interface RunChangeFeedOptions {
  db: Queryable
  /** Milliseconds between polls. @default 500 */
  intervalMs?: number
  logger?: Pick<Logger, 'warn'>
  /** Called when a subscriber starts (+1) and ends (−1): the open-subscriptions gauge. */
  onWatchersChange?: (delta: 1 | -1) => void
  /**
   * Deliveries (changed runs × subscribers) one poll starts at most; a larger
   * burst is read on at the next interval, not at once (see {@link RunChangeFeed.poll}).
   * @default DEFAULT_DELIVERIES_PER_POLL
   */
  deliveriesPerPoll?: number
  /**
   * Deliveries all subscribers together take per second at most; a change
   * waiting meanwhile folds into its run's newest state (deliveryPace.ts).
   * 0: no pace. @default 0
   */
  deliveriesPerSecond?: number
}

interface Seen {
  fingerprint: string
  status: RunStatus
  terminal: boolean
  updatedAt: number
}

const filterKeys = new WeakMap<RunFilter, string>()

/** Equal filters get equal keys (each filter object is keyed once). */
function filterKey(filter: RunFilter): string {
  let key = filterKeys.get(filter)
  if (key === undefined) {
    key = JSON.stringify([
      filter.definitionId,
      filter.statuses ? [...filter.statuses].sort() : null,
      filter.scope,
      filter.scheduledAfter?.getTime() ?? null,
      filter.scheduledBefore?.getTime() ?? null,
      filter.rehearsal,
    ])
    filterKeys.set(filter, key)
  }
  return key
}

function fingerprintOf(
  row: Pick<RunChangeRow, 'status' | 'health' | 'currentPhase' | 'waitingSteps'>,
): string {
  return `${row.status}|${row.health}|${row.currentPhase ?? ''}|${row.waitingSteps}`
}

export class RunChangeFeed {
  private readonly listeners = new Set<RunChangeListener>()
  private readonly loop: PollLoop
  private readonly seen = new Map<number, Seen>()
  /** Newest updated_at seen (epoch ms); null until a baseline is taken. */
  private watermark: number | null = null
  /** Where a read cut short by the page budget goes on. */
  private resumeAfter: { updatedAt: Date; id: number } | null = null
  private baselineTakenAt = 0
  private baseline: Promise<void> | null = null
  /** Bumped when the feed forgets (nobody listens): a read begun before is discarded. */
  private generation = 0
  private closed = false
  private readonly intervalMs: number
  private readonly deliveriesPerPoll: number
  private readonly pace: DeliveryPace | null
  /** When a poll last stopped at the delivery budget with changes left to read (epoch ms). */
  private budgetCutAt = 0
  /** Deliveries handed to subscribers since creation, and the most one poll handed out (tests, metrics). */
  readonly deliveries = { total: 0, mostInOnePoll: 0, pollsCutByBudget: 0 }

  constructor(private readonly opts: RunChangeFeedOptions) {
    this.intervalMs = opts.intervalMs ?? 500
    this.deliveriesPerPoll = opts.deliveriesPerPoll ?? DEFAULT_DELIVERIES_PER_POLL
    const perSecond = opts.deliveriesPerSecond ?? 0
    this.pace = perSecond > 0 ? new DeliveryPace(perSecond) : null
    this.loop = new PollLoop({
      intervalMs: this.intervalMs,
      minGapMs: Math.min(CHANGES_MIN_GAP_MS, this.intervalMs),
      poll: () => this.poll(),
      hasListeners: () => this.listeners.size > 0,
      onError: (err) => opts.logger?.warn({ err }, 'runChanges poll failed; retrying at the next interval'),
    })
  }

  /** Subscribers right now. */
  get listenerCount(): number {
    return this.listeners.size
  }

  /** Polls since creation. */
  get polls(): number {
    return this.loop.polls
  }

  /** Something changed in this process: look now rather than at the next interval. */
  wake(): void {
    this.loop.wake()
  }

  /** Register a listener; answers the function that removes it. */
  listen(listener: RunChangeListener): () => void {
    if (this.closed) {
      listener.onClose()
      return () => {}
    }
    // A baseline nobody used for a while is stale: changes made since would be
    // reported as new. Take a fresh one at the first poll instead.
    if (
      this.listeners.size === 0 &&
      this.watermark !== null &&
      Date.now() - this.baselineTakenAt > Math.max(5000, 10 * this.intervalMs)
    ) {
      this.forget()
    }
    this.listeners.add(listener)
    this.loop.ensure()
    return () => this.remove(listener)
  }

  /** Take the baseline if there is none (once, however many subscribers ask at once). */
  ready(): Promise<void> {
    if (this.watermark !== null) return Promise.resolve()
    this.baseline ??= this.takeBaseline().finally(() => {
      this.baseline = null
    })
    return this.baseline
  }

  /**
   * The `runChanges` stream for `filter`: every later change of a matching run,
   * the whole run each time. A slow consumer gets each run's newest state once
   * (older pending states of the same run are replaced), never a stale one.
   */
  async watch(filter: RunFilter): Promise<AsyncIterableIterator<RunChange>> {
    // The baseline is taken before the stream opens, so what happens after the
    // subscription was accepted is reported and what happened before is not.
    await this.ready()
    return new Repeater<RunChange>(async (push, stop) => {
      const pending = new Map<number, RunChange>()
      let wakeUp: (() => void) | null = null
      /** Ends a wait for the pace (a stop or the feed's close; a new change does not). */
      let paceOver: (() => void) | null = null
      let ended = false
      const unlisten = this.listen({
        filter,
        onChange: (change) => {
          // A run already waiting keeps its place with its newest state: moved
          // to the back, a run that changes often could wait behind the backlog
          // for as long as it keeps changing.
          pending.set(change.run.id, change)
          if (pending.size > MAX_PENDING) pending.delete(pending.keys().next().value as number)
          wakeUp?.()
        },
        onClose: () => {
          ended = true
          wakeUp?.()
          paceOver?.()
        },
      })
      this.opts.onWatchersChange?.(1)
      let stopped = false
      stop.then(() => {
        stopped = true
        wakeUp?.()
        paceOver?.()
      })
      try {
        while (!stopped) {
          const next = pending.entries().next()
          if (next.done) {
            if (ended) break
            await new Promise<void>((resolve) => {
              wakeUp = resolve
            })
            wakeUp = null
            continue
          }
          const wait = ended || !this.pace ? 0 : this.pace.take()
          if (wait > 0) {
            // Not yet: changes arriving meanwhile fold into the pending ones.
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, wait)
              paceOver = () => {
                clearTimeout(timer)
                resolve()
              }
            })
            paceOver = null
            continue
          }
          const [id, change] = next.value
          pending.delete(id)
          // Not raced against `stop`: a race adds a reaction to the pending
          // stop promise on every delivery, kept (about 300 bytes each) for as
          // long as the subscription lives, a dashboard's whole day. A stopped
          // Repeater resolves its pending pushes, so this returns on stop too.
          await push(change)
        }
      } finally {
        unlisten()
        this.opts.onWatchersChange?.(-1)
        stop()
      }
    })
  }

  /** Stop polling and end every subscriber (server shutdown). */
  async close(): Promise<void> {
    this.closed = true
    const all = [...this.listeners]
    this.listeners.clear()
    this.forget()
    for (const l of all) l.onClose()
    await this.loop.close()
  }

  private remove(listener: RunChangeListener): void {
    if (!this.listeners.delete(listener)) return
    if (this.listeners.size === 0) {
      this.loop.idle()
      this.forget()
    }
  }

  /** Nobody listens: drop what was seen, so the next subscriber starts from a fresh baseline. */
  private forget(): void {
    this.generation++
    this.watermark = null
    this.resumeAfter = null
    this.seen.clear()
  }

  private remember(row: RunChangeRow | RunListRow): void {
    this.seen.delete(row.id)
    this.seen.set(row.id, {
      fingerprint: fingerprintOf(row),
      status: row.status,
      terminal: isTerminal(row.status),
      updatedAt: row.updatedAt.getTime(),
    })
  }

  private async takeBaseline(): Promise<void> {
    const generation = this.generation
    const rows = await changeBaseline(this.opts.db, CHANGE_OVERLAP_MS)
    if (generation !== this.generation) return
    let newest = 0
    for (const row of rows) {
      this.remember(row)
      newest = Math.max(newest, row.updatedAt.getTime())
    }
    this.watermark = newest
    this.baselineTakenAt = Date.now()
  }

  private async poll(): Promise<void> {
    if (this.listeners.size === 0) return
    if (this.watermark === null) {
      await this.ready()
      return
    }
    // A burst cut short by the delivery budget is read on one interval later,
    // whatever wakes the loop meanwhile: the budget bounds work per interval,
    // not only per poll. (What changed meanwhile is behind it in the order anyway.)
    if (this.resumeAfter !== null && Date.now() - this.budgetCutAt < this.intervalMs) {
      return
    }
    const generation = this.generation
    const db = this.opts.db
    let after = this.resumeAfter
    const from = after ? after.updatedAt : new Date(this.watermark - CHANGE_OVERLAP_MS)
    let newest = this.watermark
    const changed: RunChangeRow[] = []
    /** Each changed run's status as last seen: a run leaving a filter is news to that filter. */
    const previously = new Map<number, RunStatus>()
    let complete = false
    let cut = false
    // Every changed run goes to every subscriber at worst: read as many as the
    // budget allows this poll (never fewer than MIN_ROWS_PER_POLL).
    const rowBudget = Math.max(MIN_ROWS_PER_POLL, Math.floor(this.deliveriesPerPoll / this.listeners.size))
    for (let page = 0; page < MAX_PAGES_PER_POLL; page++) {
      const pageSize = Math.min(CHANGE_PAGE, rowBudget - changed.length)
      const rows = await changedSince(db, from, after, pageSize)
      if (generation !== this.generation) return
      for (const row of rows) {
        const at = row.updatedAt.getTime()
        if (at > newest) newest = at
        const before = this.seen.get(row.id)
        if (before && before.fingerprint === fingerprintOf(row)) {
          before.updatedAt = Math.max(before.updatedAt, at)
          continue
        }
        if (before) previously.set(row.id, before.status)
        this.remember(row)
        changed.push(row)
      }
      const last = rows.at(-1)
      if (rows.length < pageSize || !last) {
        complete = true
        break
      }
      after = { updatedAt: last.updatedAt, id: last.id }
      if (changed.length >= rowBudget) {
        cut = true
        break
      }
    }
    this.watermark = newest
    this.resumeAfter = complete ? null : after
    if (cut) {
      this.budgetCutAt = Date.now()
      this.deliveries.pollsCutByBudget++
    } else if (!complete) this.loop.wake()
    this.prune()
    await this.deliver(changed, previously, generation)
  }

  /** Read whole and hand out the changed runs some subscriber's filter matches. */
  private async deliver(
    changed: RunChangeRow[],
    previously: Map<number, RunStatus>,
    generation: number,
  ): Promise<void> {
    // A listener hears a run that matches its filter now, or matched it as last
    // seen (only the status can stop a run matching: the other fields never change).
    const concerns = (filter: RunFilter, run: RunChangeRow | RunListRow): boolean => {
      if (matchesFilter(filter, run)) return true
      const status = previously.get(run.id)
      return status !== undefined && matchesFilter(filter, { ...run, status })
    }
    // Subscribers share a few filters: each run is tested once per distinct filter.
    const groups = new Map<string, { filter: RunFilter; listeners: RunChangeListener[] }>()
    for (const listener of this.listeners) {
      const key = filterKey(listener.filter)
      const group = groups.get(key)
      if (group) group.listeners.push(listener)
      else groups.set(key, { filter: listener.filter, listeners: [listener] })
    }
    const wanted = changed.filter((row) => [...groups.values()].some((g) => concerns(g.filter, row)))
    if (wanted.length === 0) return
    const runs: RunListRow[] = []
    for (let i = 0; i < wanted.length; i += FETCH_CHUNK) {
      const ids = wanted.slice(i, i + FETCH_CHUNK).map((r) => r.id)
      runs.push(...(await getByIds(this.opts.db, ids)))
      if (generation !== this.generation) return
    }
    runs.sort((a, b) => a.updatedAt.getTime() - b.updatedAt.getTime() || a.id - b.id)
    // What is handed out is the run as read now, which may be newer than the
    // change found above (a run answered and advanced in between): remember
    // that, so the next poll does not report the same state a second time.
    for (const run of runs) {
      const before = this.seen.get(run.id)
      if (!before || before.updatedAt <= run.updatedAt.getTime()) this.remember(run)
    }
    const loaders = createLoaders(this.opts.db)
    loaders.rememberRuns(runs)
    // Their definitions read now, in one statement: a dashboard's selection
    // almost always names the definition. Left to the loader, a definition was
    // read when the first subscriber reached a change of it, a statement per
    // definition per poll, and every stream waited there with its changes
    // behind it (at showtime a dashboard took about 20 changes a second and
    // fell 4-6 s behind).
    await loaders.preloadParents(runs, { definitions: true, versions: false })
    if (generation !== this.generation) return
    let handed = 0
    for (const run of runs) {
      const change = { run, loaders }
      for (const group of groups.values()) {
        if (!concerns(group.filter, run)) continue
        for (const listener of group.listeners) {
          // Left meanwhile (an earlier listener's handler may end another's stream).
          if (!this.listeners.has(listener)) continue
          handed++
          try {
            listener.onChange(change)
          } catch (err) {
            this.opts.logger?.warn({ err, runId: run.id }, 'a runChanges listener failed')
          }
        }
      }
    }
    this.deliveries.total += handed
    this.deliveries.mostInOnePoll = Math.max(this.deliveries.mostInOnePoll, handed)
  }

  /** Keep the memory bounded: forget finished runs out of the re-read window first, then the oldest. */
  private prune(): void {
    if (this.seen.size <= MAX_REMEMBERED) return
    const horizon = (this.watermark ?? 0) - CHANGE_OVERLAP_MS
    for (const [id, s] of this.seen) {
      if (s.terminal && s.updatedAt < horizon) this.seen.delete(id)
    }
    for (const id of this.seen.keys()) {
      if (this.seen.size <= MAX_REMEMBERED * 0.9) break
      this.seen.delete(id)
    }
  }
}
