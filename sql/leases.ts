/**
 * Leases live on the database's clock.
 *
 * A lease's expiry (`claim_expires_at`, on runs and on steps) is written as
 * `NOW(3)` plus the lease's length and compared with `NOW(3)`, never with an
 * instance's own clock: two instances whose clocks disagree by a minute must
 * not take over each other's live leases, and one clock (the database's) makes
 * "expired" mean the same to every instance. Only the lease's length crosses
 * from the caller's clock (`leaseUntil - now`, both the caller's).
 *
 * Due times (`wake_at`, a step's timer and backoff, `started_at`) stay on the
 * runner's clock, which tests move by hand: they say when work is due, not who
 * owns it, so a skewed instance can at worst look at a run early or late; the
 * lease decides who may act.
 */

/** The SQL for a lease expiry: bind {@link leaseMicros} to its `?`. */
export const LEASE_EXPIRY = 'NOW(3) + INTERVAL ? MICROSECOND'

/** SQL: the lease in `claim_expires_at` (of `alias`, if given) has run out, or there is none. */
export function leaseFree(alias = ''): string {
  const col = `${alias ? `${alias}.` : ''}claim_expires_at`
  return `(${col} IS NULL OR ${col} < NOW(3))`
}

/** A lease's length in microseconds, measured on the caller's clock (negative: already run out). */
export function leaseMicros(leaseUntil: Date, now: Date): number {
  return Math.round((leaseUntil.getTime() - now.getTime()) * 1000)
}
