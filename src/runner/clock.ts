/**
 * The clock the runner and the controls read. Production uses the system
 * clock; tests inject one they move by hand, so tests about time (backoffs,
 * waits, grace windows, DST) never sleep.
 */
export interface Clock {
  now(): Date
}

export const systemClock: Clock = { now: () => new Date() }
