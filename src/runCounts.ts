/**
 * Runs by status for `/metrics`, at a cost that does not grow with history.
 *
 * Counting every run ever made walks the whole status index: at a million runs
 * that took 190–430 ms of database time, on every scrape of every instance. A
 * scrape does not need that: the statuses a run is still moving through are
 * counted exactly on each scrape (a walk of their index ranges, which holds the
 * runs in flight and those scheduled ahead), while the terminal statuses, which
 * only ever grow, come from a full count taken at most once per
 * `terminalMaxAgeMs`. That count runs in the background once a value exists, so
 * a slow one never holds up a scrape; the first scrape waits for it.
 *
 * `health.runsByStatus` is not served from here: a person asking gets exact
 * figures.
 */
import type { Queryable } from '../sql/db.ts'
import { countByStatus, countLiveByStatus } from '../sql/eventRuns/index.ts'
import { TERMINAL } from '../sql/states.ts'

/** Options of {@link createRunCounts}. */
export interface RunCountsOptions {
  /** How old the terminal statuses' counts may get before a scrape starts a new full count. @default 300000 (5 min) */
  terminalMaxAgeMs?: number
  /** The clock, in epoch ms. @default Date.now */
  now?: () => number
  /** Told when a background full count fails (the previous counts are kept meanwhile). */
  onRefreshError?: (err: unknown) => void
}

type Counts = Record<string, number>

/** A runs-by-status reader for the metrics gauge (see the module comment). */
export interface RunCountsReader {
  (): Promise<Counts>
  /**
   * Run history retention deleted these terminal runs: take them off the
   * cached terminal counts now, and count afresh at the next scrape (a full
   * count in flight may or may not have seen them).
   */
  adjustForDeletedRuns(byStatus: Partial<Record<string, number>>): void
}

export function createRunCounts(db: Queryable, opts: RunCountsOptions = {}): RunCountsReader {
  const maxAgeMs = opts.terminalMaxAgeMs ?? 300_000
  const now = opts.now ?? Date.now
  let terminal: { at: number; counts: Counts } | null = null
  let refreshing: Promise<void> | null = null

  // One full count at a time, however many scrapes overlap it.
  const refresh = (): Promise<void> => {
    refreshing ??= (async () => {
      const startedAt = now()
      const all = await countByStatus(db)
      terminal = { at: startedAt, counts: Object.fromEntries(TERMINAL.map((s) => [s, all[s]])) }
    })().finally(() => {
      refreshing = null
    })
    return refreshing
  }

  const read = async () => {
    if (terminal === null) await refresh()
    else if (now() - terminal.at >= maxAgeMs) refresh().catch((err: unknown) => opts.onRefreshError?.(err))
    const live = await countLiveByStatus(db)
    return { ...(terminal as { counts: Counts }).counts, ...live }
  }
  return Object.assign(read, {
    adjustForDeletedRuns(byStatus: Partial<Record<string, number>>) {
      if (terminal === null) return
      for (const [status, n] of Object.entries(byStatus)) {
        if (status in terminal.counts && n)
          terminal.counts[status] = Math.max(0, (terminal.counts[status] ?? 0) - n)
      }
      terminal.at = Number.NEGATIVE_INFINITY
    },
  })
}
