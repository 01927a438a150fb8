/**
 * Gives a busy spell's garbage back once the instance is quiet again.
 *
 * `npm start` runs node with V8's memory reducer off (`--no-memory-reducer`,
 * docs/performance.md): its compacting collections after a busy spell paused
 * the process 19–25 ms at a random moment, inside a pass, at a start. Without
 * it V8 collects only when allocation fills the heap, and an idle server
 * allocates little: after a show of 1,000 runs the heap held 237 MB, of which
 * a full collection left 56 (the idle level). Nothing of ours was retained;
 * the garbage was never collected, so neither the heap nor RSS came down.
 *
 * Here one full collection replaces the reducer's (more, at the next quiet
 * checks, while the first leaves sparse pages held: see collectInAWindow), at
 * a moment chosen not to land on a start: the heap V8 holds has grown `growthBytes`
 * past what our last collection (or the start) left, the event loop was less than
 * `quietUtilisation` busy over the last check's interval, and the runner (if
 * any) sleeps at least `freeAheadMs` more; if it does not, the collection
 * waits for the runner's next sleep. The runner sleeps at most TICK_MS, aimed
 * at the next due run; a 212 MB heap took 299 ms to collect on the loaded
 * 2-core machine (146 MB: 31–62 ms in the test), so 250 ms was too little.
 * An instance with nobody calling it allocates next to nothing and never
 * collects; a check is one heap-statistics read, no statement.
 */
import { performance } from 'node:perf_hooks'
import { getHeapStatistics, setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { Logger } from './log.ts'

/** What one quiet collection did (bytes and milliseconds). */
export interface Collected {
  pauseMs: number
  usedBefore: number
  usedAfter: number
  heldAfter: number
  again: boolean
}

export interface QuietCollectOptions {
  /** How long the runner sleeps on (ms), or null without a runner. */
  asleepForMs: () => number | null
  /** @default 5000 */
  everyMs?: number
  /** @default 64 MiB */
  growthBytes?: number
  /** @default 0.1 */
  quietUtilisation?: number
  /**
   * The runner must sleep on at least this long, or twice the last pause if
   * longer (a pause must end before the runner's next pass). @default 800
   */
  freeAheadMs?: number
  /** A full collection. @default V8's `gc` (exposed to a fresh context only, not to the program) */
  collect?: () => void
  /**
   * Collect once now, so the floor is the live heap rather than start-up's
   * garbage; the server does it before its runner starts, where a pause
   * delays no start. @default false
   */
  collectAtStart?: boolean
  /**
   * After each collection: its pause, the heap used before and after, the
   * heap V8 holds after, and whether another collection follows at the next
   * quiet check (the pages it left are sparse).
   */
  onCollected?: (c: Collected) => void
}

/** Full collections after one busy spell, at most: the first, then compactions while they give pages back. */
export const MAX_COLLECTIONS_PER_SPELL = 4

/** The two figures of V8's heap statistics a decision reads. */
export interface HeapSizes {
  /** What V8 holds (`total_heap_size`). */
  total_heap_size: number
  /** What live objects and not yet collected garbage use (`used_heap_size`). */
  used_heap_size: number
}

/**
 * Whether the next quiet check collects again, after the `nth` collection of
 * a spell took the heap from `before` to `after`: while what V8 holds is
 * still `growth` above what is used (sparse pages left), up to
 * {@link MAX_COLLECTIONS_PER_SPELL}, and, after the first, only while the
 * last one gave back at least half of `growth` (one that compacts nothing
 * will not be followed by one that does).
 */
export function collectAgain(nth: number, before: HeapSizes, after: HeapSizes, growth: number): boolean {
  const sparse = after.total_heap_size - after.used_heap_size >= growth
  const gaveBack = before.total_heap_size - after.total_heap_size
  return sparse && nth < MAX_COLLECTIONS_PER_SPELL && (nth === 1 || gaveBack >= growth / 2)
}

/** V8's `gc`, reached through a context of its own so no global `gc` appears in the program. */
function v8Collect(): () => void {
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as () => void
}

export function startQuietCollect(opts: QuietCollectOptions): { stop(): void } {
  const collect = opts.collect ?? v8Collect()
  const growth = opts.growthBytes ?? 64 * 2 ** 20
  const quiet = opts.quietUtilisation ?? 0.1
  const freeAhead = opts.freeAheadMs ?? 800
  let lastPauseMs = 0
  /** Collections of the current spell so far (0: none since the last one that set the floor). */
  let spellCollections = 0
  // What the heap held after the last collection of ours (or at start). Not
  // lowered by V8's own collections: one under load leaves the load's live
  // data, which is garbage a minute later, and would hide it.
  if (opts.collectAtStart) collect()
  let floor = getHeapStatistics().used_heap_size
  let elu = performance.eventLoopUtilization()
  let waiting: ReturnType<typeof setTimeout> | null = null
  let stopped = false

  /** Collect when the runner has just gone to sleep; until then look again shortly (at most ~2 s). */
  const collectInAWindow = (triesLeft: number) => {
    waiting = null
    if (stopped) return
    const asleep = opts.asleepForMs()
    if (asleep !== null && asleep < Math.max(freeAhead, 2 * lastPauseMs)) {
      if (triesLeft > 0) {
        // Its sleep ends in `asleep` ms; the pass after it is short when quiet.
        waiting = setTimeout(() => collectInAWindow(triesLeft - 1), Math.max(20, asleep + 20))
        waiting.unref()
      }
      return
    }
    // A burst that began since the check (the retries above can take ~2 s)
    // must not meet a full collection's pause: give up until the next quiet check.
    // (Over a window long enough to say: read at once, the window is this very turn.)
    const since = performance.eventLoopUtilization(elu)
    if (since.idle + since.active > 200 && since.utilization >= quiet) return
    const before = getHeapStatistics()
    const usedBefore = before.used_heap_size
    const t0 = performance.now()
    collect()
    const pauseMs = performance.now() - t0
    lastPauseMs = pauseMs
    const after = getHeapStatistics()
    // One collection frees the pages a spell left empty, but pages where a few
    // of its objects survived stay committed, mostly empty: V8 moves those
    // survivors out (and gives the pages back) only when a later collection
    // picks the pages, and with the reducer off nothing comes. After a show
    // the heap in use was back at 69 MB while V8 held 274. So when what V8
    // holds still exceeds what is used by `growth`, the floor is what is used,
    // and the next quiet check collects once more; that one compacts (in a
    // test, 235 MB held fell to 51). V8 picks only some pages for each
    // compaction: after another show a second collection left 247 MB held of
    // 71 used. So the checks go on collecting while each gives back at least
    // half of `growth` and the held heap is still `growth` above the used, up
    // to MAX_COLLECTIONS_PER_SPELL; whatever the last leaves is the floor.
    spellCollections++
    const again = collectAgain(spellCollections, before, after, growth)
    if (!again) spellCollections = 0
    floor = again ? after.used_heap_size : after.total_heap_size
    opts.onCollected?.({
      pauseMs,
      usedBefore,
      usedAfter: after.used_heap_size,
      heldAfter: after.total_heap_size,
      again,
    })
  }

  const timer = setInterval(() => {
    const busy = performance.eventLoopUtilization(elu).utilization
    elu = performance.eventLoopUtilization()
    if (waiting) return
    if (getHeapStatistics().total_heap_size - floor < growth || busy >= quiet) return
    collectInAWindow(20)
  }, opts.everyMs ?? 5000)
  timer.unref()
  return {
    stop() {
      stopped = true
      clearInterval(timer)
      if (waiting) clearTimeout(waiting)
    },
  }
}

/**
 * The server's collector: start-up's garbage collected at once (before the
 * runner starts, where a pause delays no start), each later collection logged.
 */
export function startLoggedQuietCollect(
  logger: Pick<Logger, 'info'>,
  asleepForMs: () => number | null,
): { stop(): void } {
  return startQuietCollect({
    collectAtStart: true,
    asleepForMs,
    onCollected: ({ pauseMs, usedBefore, usedAfter, heldAfter, again }) =>
      logger.info(
        {
          pauseMs: Math.round(pauseMs),
          heapUsedMb: [usedBefore, usedAfter].map((b) => Math.round(b / 2 ** 20)),
          heapHeldMb: Math.round(heldAfter / 2 ** 20),
        },
        again
          ? 'the busy spell is over: its garbage collected; its sparse pages are compacted at the next quiet check'
          : 'the busy spell is over: its garbage collected',
      ),
  })
}
