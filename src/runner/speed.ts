/**
 * Rehearsal at speed: a rehearsal started with `speed` S runs its show's time
 * S times faster, so a two-hour show can be rehearsed in two minutes at 60.
 * Every timer that stands for the show's time goes through here: `core.wait`
 * (seconds and `until` offsets), cue deadlines, and the cue ladder's reminders
 * and escalations. Timers that protect the machinery (step timeouts, webhook
 * backoff, leases) are not the show's time and are never scaled.
 */

/** The slowest and fastest speed a rehearsal may run at (1 = real time). */
export const MIN_SPEED = 1
export const MAX_SPEED = 3600

/** A span of the show's time, in ms, as it passes for a run at `speed`. */
export function scaledMs(ms: number, speed: number | undefined): number {
  const s = speed && Number.isFinite(speed) && speed > 1 ? speed : 1
  return ms / s
}

/** `from` plus `seconds` of the show's time, for a run at `speed`. */
export function showTimeAfter(from: Date, seconds: number, speed: number | undefined): Date {
  return new Date(from.getTime() + scaledMs(seconds * 1000, speed))
}

/** Why a requested speed is refused, or null when it is fine. */
export function speedProblem(speed: number, rehearsal: boolean): string | null {
  if (!Number.isFinite(speed) || speed < MIN_SPEED || speed > MAX_SPEED)
    return `speed must be from ${MIN_SPEED} to ${MAX_SPEED} (got ${speed}).`
  if (speed !== 1 && !rehearsal)
    return 'speed applies to rehearsals only: start with rehearsal: true, or leave speed at 1.'
  return null
}
