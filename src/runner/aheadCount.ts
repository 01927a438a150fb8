/**
 * How many occurrences of a definition's schedule lie in `(now, from]`: the runs
 * a group of scopes already has ahead of now, which the materialiser's count
 * bound is measured against.
 *
 * Counting walks the schedule at about 25 µs an occurrence (croner's
 * `nextRun`), all of it on the event loop. A per-second schedule keeps 1,000
 * runs ahead, so a full count held the loop for about 26 ms on every pass, and
 * a hundred such definitions would hold it for seconds. So a pass leaves its
 * exact count behind, keyed by the schedule and the instant it reached, and the
 * next pass takes off what has come due since: about 60 occurrences a minute
 * for a per-second schedule instead of 1,000.
 *
 * The count is a pure function of the schedule and the two instants, so a
 * remembered one is never stale. A miss (another instance moved the watermark,
 * the process restarted) counts in full.
 */
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import { occurrenceStream } from './schedule.ts'

interface Counted {
  /** The `now` the count was taken at. */
  nowMs: number
  /** Occurrences in `(now, from]`, exactly. */
  ahead: number
}

const remembered = new Map<string, Counted>()
/** Enough for every (definition, watermark group) of a large deployment; cleared past it. */
const REMEMBERED_MAX = 10_000

/** Occurrences walked while counting since the process started; tests read it to prove the walk is short. */
export const aheadCountStats = { walked: 0 }

/** Forget the remembered counts (of one definition, or all), as a restart would. For tests. */
export function forgetAheadCounts(definitionId?: number): void {
  for (const key of remembered.keys())
    if (definitionId === undefined || key.startsWith(`${definitionId}\n`)) remembered.delete(key)
}

type Schedule = Pick<DefinitionRow, 'id' | 'schedule' | 'timezone' | 'startsAt' | 'endsAt'>

function keyOf(def: Schedule, fromMs: number): string {
  return [def.id, def.schedule, def.timezone, def.startsAt?.getTime(), def.endsAt?.getTime(), fromMs].join(
    '\n',
  )
}

/** Occurrences in `(afterMs, untilMs]`, at most `cap` (the count stops there). */
function countBetween(def: Schedule, afterMs: number, untilMs: number, cap: number): number {
  let n = 0
  if (untilMs <= afterMs) return 0
  for (const t of occurrenceStream(def.schedule as string, def.timezone, new Date(afterMs), def)) {
    aheadCountStats.walked++
    if (t > untilMs || n >= cap) break
    n++
  }
  return n
}

/**
 * Occurrences of `def`'s schedule in `(now, from]`, counted up to `cap`: the
 * exact count when it is below `cap`, else `cap`.
 */
export function occurrencesAhead(def: Schedule, from: Date, now: Date, cap: number): number {
  const fromMs = from.getTime()
  const nowMs = now.getTime()
  if (fromMs <= nowMs) return 0
  const key = keyOf(def, fromMs)
  const known = remembered.get(key)
  let ahead: number
  if (known && known.nowMs <= nowMs) {
    // Those in (then, now] have come due since: at most `known.ahead` of them.
    ahead = known.ahead - countBetween(def, known.nowMs, nowMs, known.ahead)
  } else {
    ahead = countBetween(def, nowMs, fromMs, cap)
    // At the cap the count stopped early: more may lie ahead, so it is not kept.
    if (ahead >= cap) return cap
  }
  // Kept as of now, so a pass that finds the window full (and writes nothing)
  // leaves the next one a short walk too.
  remember(key, nowMs, ahead)
  return Math.min(cap, ahead)
}

/**
 * A pass made the runs of `(from, reached]`: `(now, reached]` holds exactly
 * `ahead` occurrences of `def`'s schedule. Kept for the next pass, in place of
 * the count up to `from`.
 */
export function rememberAhead(def: Schedule, from: Date, reached: Date, now: Date, ahead: number): void {
  remembered.delete(keyOf(def, from.getTime()))
  remember(keyOf(def, reached.getTime()), now.getTime(), ahead)
}

function remember(key: string, nowMs: number, ahead: number): void {
  if (remembered.size >= REMEMBERED_MAX && !remembered.has(key)) remembered.clear()
  remembered.set(key, { nowMs, ahead })
}
