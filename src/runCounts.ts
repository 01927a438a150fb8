/**
 * Runs by status for `/metrics` and the `health` query, at a cost that does not
 * grow with history nor with the runs scheduled ahead.
 *
 * Counting every run on every call walks the whole table: at a million runs
 * that took 190–430 ms of database time per scrape, and `health` did it on each
 * call. Instead the whole table is counted once (the first call waits for it),
 * up to two marks: terminal runs that ended by a given instant, and all runs up
 * to a given id. Terminal runs never change status again, so that part of the
 * count stays true. Each call then counts, in one snapshot, only what lies past
 * the marks (runs ended since, runs made since: index ranges) and the runs in
 * flight; scheduled runs are what is left. The marks move forward at most once
 * a minute, counting only what they pass over.
 *
 * Every figure is exact at the call. The run retention sweep deletes old
 * finished runs, which lie behind the marks: it reports what it deleted
 * ({@link RunCountsReader.adjustForDeletedRuns}) and they are taken off the
 * base. Anything else that deletes runs behind the marks is caught by the full
 * count that runs in the background once an hour.
 *
 * One counter per database pool ({@link runCountsFor}), shared by the metrics
 * gauge and `health`, so a process counts the table once however both are used.
 */
import type { Db } from '../sql/db.ts'
import {
  advanceRunCountBase,
  countRunBase,
  countRunsRecent,
  type RunCountBase,
} from '../sql/eventRuns/index.ts'
import type { RunStatus } from '../sql/states.ts'

/** Options of {@link createRunCounts}. */
export interface RunCountsOptions {
  /** How often the marks move forward (counting only what they pass). @default 60000 */
  advanceEveryMs?: number
  /**
   * How often the whole table is counted again, in the background, so that runs
   * deleted behind the marks stop being counted. @default 3600000 (1 h)
   */
  fullEveryMs?: number
  /**
   * How far the marks trail the database clock, in seconds: longer than any
   * transaction that writes runs, so none commits behind a mark. @default 120
   */
  lagSeconds?: number
  /** The clock, in epoch ms. @default Date.now */
  now?: () => number
  /** Told when a background full count fails (the previous base is kept meanwhile). */
  onRefreshError?: (err: unknown) => void
}

/** Runs per status, every status present. */
export type RunCounts = Record<RunStatus, number>

/** A runs-by-status reader (see the module comment). */
export interface RunCountsReader {
  (): Promise<RunCounts>
  /**
   * Run history retention deleted these terminal runs (all behind the marks):
   * take them off the base now. A full count in flight may or may not have seen
   * them, so the next call counts afresh as well.
   */
  adjustForDeletedRuns(byStatus: Partial<Record<string, number>>): void
}

export function createRunCounts(db: Db, opts: RunCountsOptions = {}): RunCountsReader {
  const advanceEveryMs = opts.advanceEveryMs ?? 60_000
  const fullEveryMs = opts.fullEveryMs ?? 3_600_000
  const lagSeconds = opts.lagSeconds ?? 120
  const now = opts.now ?? Date.now
  let base: { value: RunCountBase; countedAt: number; advancedAt: number } | null = null
  let full: Promise<void> | null = null

  // One full count at a time, however many calls overlap it.
  const countAll = (): Promise<void> => {
    full ??= (async () => {
      const startedAt = now()
      const value = await db.transaction((tx) => countRunBase(tx, lagSeconds))
      base = { value, countedAt: startedAt, advancedAt: startedAt }
    })().finally(() => {
      full = null
    })
    return full
  }

  const read = async (): Promise<RunCounts> => {
    if (base === null) await countAll()
    else if (now() - base.countedAt >= fullEveryMs)
      countAll().catch((err: unknown) => opts.onRefreshError?.(err))
    const current = base as unknown as NonNullable<typeof base>
    return db.transaction(async (tx) => {
      // One snapshot: the marks' move and the counts past them see the same runs.
      let value = current.value
      if (now() - current.advancedAt >= advanceEveryMs) {
        value = await advanceRunCountBase(tx, value, lagSeconds)
      }
      const recent = await countRunsRecent(tx, value.marks)
      // Keep the moved marks unless a full count replaced the base meanwhile.
      if (base === current && value !== current.value) {
        base = { value, countedAt: current.countedAt, advancedAt: now() }
      }
      const terminal = {
        completed: value.terminal.completed + recent.terminal.completed,
        cancelled: value.terminal.cancelled + recent.terminal.cancelled,
        failed: value.terminal.failed + recent.terminal.failed,
        missed: value.terminal.missed + recent.terminal.missed,
      }
      const all = value.total + recent.total
      const notScheduled =
        Object.values(terminal).reduce((a, b) => a + b, 0) +
        Object.values(recent.inFlight).reduce((a, b) => a + b, 0)
      // Below zero only when runs were deleted behind the marks: count again.
      if (all < notScheduled) countAll().catch((err: unknown) => opts.onRefreshError?.(err))
      return { scheduled: Math.max(0, all - notScheduled), ...recent.inFlight, ...terminal }
    })
  }

  const adjustForDeletedRuns = (byStatus: Partial<Record<string, number>>): void => {
    if (base === null) return
    const terminal = { ...base.value.terminal }
    let deleted = 0
    for (const [status, n] of Object.entries(byStatus)) {
      if (!n || !(status in terminal)) continue
      terminal[status as keyof typeof terminal] -= n
      deleted += n
    }
    base = { ...base, value: { ...base.value, terminal, total: base.value.total - deleted } }
    // A full count that started before the delete would bring them back: have it re-run.
    if (full !== null) base = { ...base, countedAt: -Infinity }
  }

  return Object.assign(read, { adjustForDeletedRuns })
}

const shared = new WeakMap<Db, RunCountsReader>()

/** The process's one runs-by-status reader for `db` (created on first use with `opts`). */
export function runCountsFor(db: Db, opts: RunCountsOptions = {}): RunCountsReader {
  let reader = shared.get(db)
  if (!reader) {
    reader = createRunCounts(db, opts)
    shared.set(db, reader)
  }
  return reader
}
