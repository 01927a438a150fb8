/** Times, durations and schedules in words. */
import cronstrue from 'cronstrue'

/** "4 s", "3 min 12 s", "2 h 5 min", "3 d 4 h". */
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000))
  if (s < 60) return `${s} s`
  const m = Math.floor(s / 60)
  if (m < 60) return s % 60 === 0 ? `${m} min` : `${m} min ${s % 60} s`
  const h = Math.floor(m / 60)
  if (h < 48) return m % 60 === 0 ? `${h} h` : `${h} h ${m % 60} min`
  const d = Math.floor(h / 24)
  return h % 24 === 0 ? `${d} d` : `${d} d ${h % 24} h`
}

/** "3 min ago" or "in 3 min". */
export function relative(iso: string | null, now: number): string {
  if (!iso) return '—'
  const delta = Date.parse(iso) - now
  if (Math.abs(delta) < 1500) return 'now'
  return delta < 0 ? `${duration(-delta)} ago` : `in ${duration(delta)}`
}

const formatters = new Map<string, Intl.DateTimeFormat>()

/** "Mon 1 Dec, 18:30" in `timeZone` (default: the viewer's). */
export function when(iso: string | null, timeZone?: string, withZone = false): string {
  if (!iso) return '—'
  const key = `${timeZone ?? ''}|${withZone}`
  let f = formatters.get(key)
  if (!f) {
    try {
      f = new Intl.DateTimeFormat(undefined, {
        weekday: 'short',
        day: 'numeric',
        month: 'short',
        hour: '2-digit',
        minute: '2-digit',
        second: '2-digit',
        hourCycle: 'h23',
        timeZone,
        timeZoneName: withZone ? 'short' : undefined,
      })
    } catch {
      f = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })
    }
    formatters.set(key, f)
  }
  return f.format(new Date(iso))
}

export const viewerZone = Intl.DateTimeFormat().resolvedOptions().timeZone

/** An ISO-8601 instant as the server writes them into log lines and errors ("retrying at 2026-…Z"). */
const ISO_INSTANT = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})/g

/**
 * `text` cut at each ISO-8601 instant in it: strings stay, instants become
 * `{ iso }`, so a page shows them in its own zone instead of raw UTC.
 */
export function splitInstants(text: string): (string | { iso: string })[] {
  const parts: (string | { iso: string })[] = []
  let last = 0
  for (const m of text.matchAll(ISO_INSTANT)) {
    const at = m.index ?? 0
    if (Number.isNaN(Date.parse(m[0]))) continue
    if (at > last) parts.push(text.slice(last, at))
    parts.push({ iso: m[0] })
    last = at + m[0].length
  }
  if (last < text.length) parts.push(text.slice(last))
  return parts
}

/** `text` with every ISO-8601 instant in it written as {@link when} in `timeZone`, with the zone's name. */
export function readableText(text: string, timeZone?: string): string {
  return splitInstants(text)
    .map((p) => (typeof p === 'string' ? p : when(p.iso, timeZone, true)))
    .join('')
}

/** A cron expression in words ("At 18:30, Monday through Friday"); the raw text when it cannot. */
export function scheduleInWords(schedule: string | null): string {
  if (!schedule) return 'Started by hand only'
  try {
    return cronstrue.toString(schedule, { use24HourTimeFormat: true, throwExceptionOnParseError: true })
  } catch {
    return schedule
  }
}

/** The prompt of a cue step, from its params: read as the runner reads it. */
export { promptOf } from '../../src/runner/steps/paramText.ts'

export function scopeLabel(scope: string): string {
  return scope === '' ? 'default scope' : scope
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2)
}
