/**
 * How long a run's lease must last while the runner advances it, and when a
 * round has to renew it.
 *
 * The rule: when a step begins, its run's lease reaches past the step's
 * timeout plus a grace, so no other claim can take the run while the step may
 * still be running (the step's own lease is set to the same length by its
 * begin). A round renews its runs' leases only when what is left falls short
 * of that.
 *
 * Why a renewal lasts a third of `LEASE_MS` longer than the step needs: a
 * renewal to exactly what the round needs is short of what the next round
 * needs a few milliseconds later, so every round of every batch renewed (an
 * UPDATE of every run in it, one more statement between a GO and the step it
 * starts). With a third of a lease to spare, the rounds that follow within
 * that third take the lease as it is; the held claims' keep-alive (held.ts)
 * renews at the same cadence. The wake lane claims for the same length
 * (`DEFAULT_STEP_NEED_MS`), so a woken run's first round, a GO's or a timer's
 * end, begins its step with no renewal at all unless the step has a longer
 * timeout than the default.
 */
import { STEP_DEFAULTS } from './program.ts'

/** What a step's lease outlasts its timeout by. */
export const STEP_LEASE_GRACE_MS = 5000

/** What a step with this timeout needs of its run's lease when it begins. */
export function stepNeedMs(timeoutMs: number): number {
  return timeoutMs + STEP_LEASE_GRACE_MS
}

/** What a step with the default timeout needs (most steps of most shows). */
export const DEFAULT_STEP_NEED_MS = stepNeedMs(STEP_DEFAULTS.timeoutSeconds * 1000)

/**
 * The lease a round renews its runs to, and a woken batch is claimed for:
 * what its steps need (at least `LEASE_MS`) and a third of `LEASE_MS` to spare.
 */
export function roundLeaseMs(leaseMs: number, neededMs: number): number {
  return Math.max(leaseMs, neededMs) + Math.floor(leaseMs / 3)
}

/**
 * Whether a round must renew before its steps begin: what is left of the
 * lease (`leaseEnds`, the runner's clock, ms) falls short of what its longest
 * step needs, or of half a lease.
 */
export function mustRenew(nowMs: number, leaseEnds: number, neededMs: number, leaseMs: number): boolean {
  return nowMs + neededMs > leaseEnds || leaseEnds - nowMs < leaseMs / 2
}
