/**
 * A cue's answer hands its run to the runner in the same process
 * (src/runner/handOff.ts): the answer's transaction claims the run for that
 * runner, where it used to only wake the run for whichever claim came next.
 */
import type { Queryable, Statement } from '../db.ts'
import { LEASE_EXPIRY, leaseFree, leaseMicros } from '../leases.ts'
import type { RunStatus } from '../states.ts'

/** A claim for the answer's transaction to take on its run, made by the runner it hands the run to. */
export interface AnswerClaim {
  owner: string
  token: string
  /** When the claim runs out, and `wake_at` for a holder that dies with it (the runner's clock). */
  leaseUntil: Date
  /** The runner's clock when the claim was made: `leaseUntil - now` is the lease's length. */
  now: Date
}

/**
 * Claim run `id` for `claim`, as the lane's lease would (owner, token, lease,
 * `wake_at` at the lease's end), if it is still `expected` (the status the
 * caller read, so the row it holds is current) and nobody holds a live lease
 * on it. A run still held (its cue answered before its park was written) is
 * not taken: the caller wakes it instead, and its holder's give-back keeps
 * that wake. Answers whether the run is now the claim's.
 */
export async function claimAnswered(
  db: Queryable,
  id: number,
  expected: RunStatus,
  claim: AnswerClaim,
): Promise<boolean> {
  const st = claimAnsweredStatement(id, expected, claim)
  if (!st) return false
  const res = await db.run(st.sql, st.params)
  return res.affectedRows === 1
}

/**
 * {@link claimAnswered} as a statement for a batch (one row affected: the
 * run is the claim's); null when the status read rules the claim out.
 */
export function claimAnsweredStatement(
  id: number,
  expected: RunStatus,
  claim: AnswerClaim,
): Statement | null {
  if (expected !== 'running' && expected !== 'ending') return null
  return {
    sql: `UPDATE event_runs
        SET claimed_by = ?, claim_token = ?, claim_expires_at = ${LEASE_EXPIRY}, wake_at = ?, woken_while_claimed = 0
      WHERE id = ? AND status = ? AND ${leaseFree()}`,
    params: [
      claim.owner,
      claim.token,
      leaseMicros(claim.leaseUntil, claim.now),
      claim.leaseUntil,
      id,
      expected,
    ],
  }
}
