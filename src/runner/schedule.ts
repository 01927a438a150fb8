/**
 * Cron schedules in IANA time zones, with the daylight-saving rule of docs/contract.md ("Schedules") applied to
 * every pattern: each wall time the pattern names fires exactly once.
 * - a wall time that exists once fires at that instant;
 * - a wall time repeated by fall-back fires at its first occurrence only;
 * - a wall time skipped by spring-forward fires at the first instant after the
 *   jump (New York 02:30 → 03:00 local);
 * - wall times that land on the same instant fire once.
 *
 * croner 11 does exactly this for fixed-time patterns (`30 2 * * *`), but treats
 * patterns with a wildcard or step in the time fields as "interval jobs": those
 * fire on both occurrences of a repeated hour (`*\/30` fires at 01:00 and 01:30
 * twice in New York in November) and drop skipped times. So croner is used here
 * for what it is best at, matching a pattern against wall-clock fields (run in a
 * zone without DST), and the wall times are mapped onto instants below. That
 * keeps one rule for every pattern and one materialised run per local occurrence.
 */
import { Cron } from 'croner'
import { badInput } from '../errors.ts'

const SECOND = 1000
const HOUR = 3_600_000
/**
 * How far around an instant to look for a UTC-offset change. Real DST shifts are
 * at most 2 h (Antarctica/Troll) and changes are months apart, so 6 h finds the
 * offsets on both sides of any transition near a wall time.
 */
const PROBE_MS = 6 * HOUR

/** Most occurrences `nextOccurrences` answers (`nextOccurrences(count)`, 1..1000). */
export const MAX_NEXT_OCCURRENCES = 1000

// ---------------------------------------------------------------------------
// Time zones

const formatters = new Map<string, Intl.DateTimeFormat>()

function formatterFor(timezone: string): Intl.DateTimeFormat {
  let f = formatters.get(timezone)
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    })
    formatters.set(timezone, f)
  }
  return f
}

/** True when Intl knows the zone (IANA names and their links, any letter case). */
export function isValidTimezone(timezone: string): boolean {
  if (typeof timezone !== 'string' || timezone.trim() === '') return false
  try {
    formatterFor(timezone)
    return true
  } catch {
    return false
  }
}

/**
 * The zone as it is stored and shown, or null when unknown: the spelling
 * fixed (`america/new_york` → `America/New_York`), a name written with care
 * kept as written. ICU's own id for a zone is sometimes an older name than
 * the IANA one a person types (`Asia/Kolkata` reads back `Asia/Calcutta`,
 * `Europe/Kyiv` `Europe/Kiev`), and people should see the zone they chose;
 * an all-lower-case alias takes ICU's id, the one spelling known to be right.
 */
export function canonicalTimezone(timezone: string): string | null {
  if (!isValidTimezone(timezone)) return null
  const resolved = formatterFor(timezone).resolvedOptions().timeZone
  if (resolved.toLowerCase() === timezone.toLowerCase()) return resolved
  return timezone === timezone.toLowerCase() ? resolved : timezone
}

/** UTC offset in ms of `timezone` at instant `ms` (wall clock = instant + offset). */
function offsetAt(timezone: string, ms: number): number {
  const t = Math.floor(ms / SECOND) * SECOND
  const f = { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0 }
  for (const part of formatterFor(timezone).formatToParts(t)) {
    if (part.type in f) f[part.type as keyof typeof f] = Number(part.value)
  }
  return Date.UTC(f.year, f.month - 1, f.day, f.hour, f.minute, f.second) - t
}

/**
 * A stretch of instants `[from, to]` known to have one UTC offset, with the same
 * offset for a probe width on both sides, so no wall time inside it is repeated
 * or skipped. Dense schedules (every second) reuse it instead of probing Intl
 * for each occurrence.
 */
interface SteadySpan {
  from: number
  to: number
  offset: number
}

/**
 * The instant a wall time fires at, the wall time given as if it were UTC ms:
 * the earliest instant showing that wall time, or, inside a spring-forward gap,
 * the transition instant (the first instant after the jump).
 */
function wallToInstant(timezone: string, wall: number, span?: { current?: SteadySpan }): number {
  const steady = span?.current
  if (steady) {
    const t = wall - steady.offset
    if (t >= steady.from && t <= steady.to) return t
  }
  const approx = wall - offsetAt(timezone, wall)
  const before = offsetAt(timezone, approx - PROBE_MS)
  const at = offsetAt(timezone, approx)
  const after = offsetAt(timezone, approx + PROBE_MS)
  // No offset change within ±6 h (two changes that close together do not occur).
  if (before === at && at === after) {
    if (span) span.current = { from: approx - PROBE_MS + 2 * HOUR, to: approx + PROBE_MS, offset: at }
    return wall - at
  }
  const offsets = new Set([before, at, after])
  let earliest: number | undefined
  for (const offset of offsets) {
    const t = wall - offset
    if (offsetAt(timezone, t) === offset && (earliest === undefined || t < earliest)) earliest = t
  }
  if (earliest !== undefined) return earliest

  // In a gap the larger offset gives an instant before the jump, the smaller one after it.
  let lo = wall - Math.max(...offsets)
  let hi = wall - Math.min(...offsets)
  const offsetBefore = offsetAt(timezone, lo)
  while (hi - lo > SECOND) {
    const mid = lo + Math.floor((hi - lo) / 2 / SECOND) * SECOND
    if (offsetAt(timezone, mid) === offsetBefore) lo = mid
    else hi = mid
  }
  return hi
}

// ---------------------------------------------------------------------------
// Cron patterns

const parsed = new Map<string, Cron>()
const PARSED_CACHE_MAX = 1000

/** croner's message without its class prefix, ending in a full stop. */
function cronerMessage(err: unknown): string {
  const text = (err instanceof Error ? err.message : String(err)).replace(/^\w+:\s*/, '')
  return /[.!?]$/.test(text) ? text : `${text}.`
}

/** Parse (cached) a validated cron pattern into a croner job in a zone without DST. */
function wallClockJob(cron: string): Cron {
  let job = parsed.get(cron)
  if (job) return job
  // utcOffset 0 matches the pattern against plain wall-clock fields; no callback = never scheduled.
  job = new Cron(cron, { utcOffset: 0, mode: '5-or-6-parts' })
  if (parsed.size >= PARSED_CACHE_MAX) parsed.clear()
  parsed.set(cron, job)
  return job
}

function cronProblem(cron: string): string | null {
  if (typeof cron !== 'string' || cron.trim() === '') {
    return 'The schedule is empty: give a cron expression such as "30 2 * * *", or null for manual-only.'
  }
  // croner reads a string with a colon as a one-off date, not a pattern.
  if (cron.includes(':')) {
    return `"${cron}" is not a cron expression: a schedule is 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), not a date.`
  }
  const trimmed = cron.trim()
  if (!trimmed.startsWith('@')) {
    const fields = trimmed.split(/\s+/).length
    if (fields !== 5 && fields !== 6) {
      return `"${cron}" has ${fields} field${fields === 1 ? '' : 's'}: a schedule is 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first).`
    }
  }
  let job: Cron
  try {
    job = new Cron(cron, { utcOffset: 0, mode: '5-or-6-parts' })
  } catch (err) {
    return `"${cron}" is not a valid cron expression: ${cronerMessage(err)}`
  }
  // An impossible date (`0 0 30 2 *`) parses fine but would materialise nothing, silently.
  if (job.nextRun(new Date()) === null) {
    return `"${cron}" never fires (no date matches it).`
  }
  return null
}

/**
 * Check a schedule before it is stored. Answers every problem found, each a
 * sentence a person can act on; empty = valid.
 */
export function validateSchedule(cron: string, timezone: string): string[] {
  const problems: string[] = []
  const problem = cronProblem(cron)
  if (problem) problems.push(problem)
  if (!isValidTimezone(timezone)) {
    problems.push(
      `Unknown time zone ${JSON.stringify(timezone)}: use an IANA name such as "UTC", "Europe/London" or "America/New_York".`,
    )
  }
  return problems
}

function assertValid(cron: string, timezone: string): Cron {
  const cached = parsed.get(cron)
  if (cached && isValidTimezone(timezone)) return cached
  const problems = validateSchedule(cron, timezone)
  if (problems.length > 0) throw badInput(`Invalid schedule: ${problems.join(' ')}`, { problems })
  return wallClockJob(cron)
}

/**
 * The occurrences strictly after `fromExclusive`, in order, each instant once.
 * Wall times map onto instants monotonically (the first occurrence of a
 * repeated wall time precedes every later wall time), so the sequence is sorted
 * and duplicates are adjacent.
 */
function* occurrencesAfter(job: Cron, timezone: string, fromExclusive: number): Generator<number> {
  // The earliest wall time that can map after `fromExclusive`: a fall-back just
  // after it lowers the offset, so start from the smaller of the two.
  const startWall =
    fromExclusive +
    Math.min(offsetAt(timezone, fromExclusive), offsetAt(timezone, fromExclusive + PROBE_MS)) -
    SECOND
  let cursor = new Date(startWall - 1)
  let last = Number.NEGATIVE_INFINITY
  const span: { current?: SteadySpan } = {}
  for (;;) {
    const next = job.nextRun(cursor)
    if (next === null) return
    cursor = next
    const instant = wallToInstant(timezone, next.getTime(), span)
    if (instant <= fromExclusive || instant === last) continue
    last = instant
    yield instant
  }
}

/** Options of {@link nextOccurrences}. */
export interface NextOccurrencesOptions {
  /** Occurrences strictly after this instant. */
  after: Date
  /** How many, 1..1000. */
  count: number
  /** The schedule's own bounds (inclusive): no occurrence outside them. */
  bounds?: ScheduleBounds
}

/** A definition's `startsAt` / `endsAt`: the schedule has no occurrence outside them (both inclusive). */
export interface ScheduleBounds {
  startsAt?: Date | null
  endsAt?: Date | null
}

/**
 * The occurrences strictly after `fromExclusive`, oldest first, inside
 * `bounds`, one at a time (epoch ms). Lazy: a caller takes what it needs and
 * stops, so a per-second schedule never becomes a day-long array.
 * @throws AppError BAD_USER_INPUT on a bad cron or unknown zone.
 */
export function* occurrenceStream(
  cron: string,
  timezone: string,
  fromExclusive: Date,
  bounds: ScheduleBounds = {},
): Generator<number> {
  const job = assertValid(cron, timezone)
  let from = fromExclusive.getTime()
  if (bounds.startsAt) from = Math.max(from, bounds.startsAt.getTime() - 1)
  const end = bounds.endsAt ? bounds.endsAt.getTime() : Number.POSITIVE_INFINITY
  for (const t of occurrencesAfter(job, timezone, from)) {
    if (t > end) return
    yield t
  }
}

/**
 * The next `count` occurrences of `cron` in `timezone` strictly after `after`.
 * Fewer when the pattern runs out (croner stops at year 3000).
 * @throws AppError BAD_USER_INPUT on a bad cron, unknown zone or count out of range.
 */
export function nextOccurrences(cron: string, timezone: string, opts: NextOccurrencesOptions): Date[] {
  const { after, count } = opts
  if (!Number.isInteger(count) || count < 1 || count > MAX_NEXT_OCCURRENCES) {
    throw badInput(`count must be an integer from 1 to ${MAX_NEXT_OCCURRENCES}; got ${count}.`)
  }
  if (!(after instanceof Date) || Number.isNaN(after.getTime())) throw badInput('after must be a valid date.')
  const out: Date[] = []
  for (const t of occurrenceStream(cron, timezone, after, opts.bounds)) {
    out.push(new Date(t))
    if (out.length >= count) break
  }
  return out
}

/**
 * Occurrences in `(fromExclusive, toInclusive]`, oldest first, at most `max`
 * (what the materialiser uses for its look-ahead horizon).
 * @throws AppError BAD_USER_INPUT on a bad cron or unknown zone.
 */
export function occurrencesBetween(
  cron: string,
  timezone: string,
  fromExclusive: Date,
  toInclusive: Date,
  max = 10_000,
  bounds: ScheduleBounds = {},
): Date[] {
  const to = toInclusive.getTime()
  const out: Date[] = []
  assertValid(cron, timezone)
  if (max < 1 || to <= fromExclusive.getTime()) return out
  for (const t of occurrenceStream(cron, timezone, fromExclusive, bounds)) {
    if (t > to) break
    out.push(new Date(t))
    if (out.length >= max) break
  }
  return out
}
