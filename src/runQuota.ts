/**
 * Runs created per principal per minute (MAX_RUNS_PER_MINUTE, 10,000 by
 * default): every mutation that creates runs takes its count before it writes
 * them (a retry in the transaction that writes its run, so a retry refused
 * there takes nothing), and is refused with RATE_LIMITED, saying when to
 * retry, when the principal's minute is full. A fixed window per clock
 * minute, counted in the database (sql/runQuotas.ts), so the quota holds
 * across every instance on it: at most `max` runs are created in any one
 * clock minute, and so at most twice that in any 60 seconds that span two.
 */
import type { Db, Queryable } from '../sql/db.ts'
import * as quotas from '../sql/runQuotas.ts'
import { AppError, ERROR_CODES } from './errors.ts'

export interface RunQuota {
  /**
   * Count `n` runs about to be created by `principal` (its actor name). Given
   * `via`, an open transaction, the count is part of it: a creation that the
   * transaction goes on to refuse and roll back takes nothing.
   * @throws {AppError} RATE_LIMITED when they do not fit in its current minute.
   */
  take(principal: string, n: number, via?: Queryable): Promise<void>
}

export function createRunQuota(db: Db, maxPerMinute: number, now: () => Date): RunQuota {
  return {
    async take(principal, n, via) {
      if (n <= 0) return
      const at = now().getTime()
      const minute = Math.floor(at / 60_000)
      const { taken } = await quotas.take(via ?? db, principal, minute, n, maxPerMinute)
      if (taken) return
      const retryAfterSeconds = Math.max(1, Math.ceil(((minute + 1) * 60_000 - at) / 1000))
      throw new AppError(
        ERROR_CODES.RATE_LIMITED,
        `Rate limit: at most ${maxPerMinute} runs may be created per principal per minute (MAX_RUNS_PER_MINUTE); ${n === 1 ? 'this run does' : `these ${n} runs do`} not fit in this minute. Retry in ${retryAfterSeconds} s.`,
        { details: { retryAfterSeconds } },
      )
    },
  }
}
