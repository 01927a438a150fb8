/**
 * Which of a DATABASE_URL's hosts the pool is on (sql/db.ts keeps one pool per
 * host): an instance stays on one node while it answers and moves to the next
 * when that node is unavailable.
 */
import type { Pool } from 'mysql2/promise'
import { isDbUnavailable, nothingRan } from './dbErrors.ts'

/**
 * One pool per host of the URL, and which one is in use. An instance stays on
 * one node while it answers (its own writes then never conflict with each other
 * in certification), and moves to the next when that node is unavailable.
 */
export class HostRouter {
  private current = 0
  constructor(readonly pools: readonly Pool[]) {}

  get pool(): Pool {
    return this.pools[this.current] as Pool
  }

  /** Which of the URL's hosts is in use. */
  get hostIndex(): number {
    return this.current
  }

  /** `pool` failed as unavailable: move to the next host, unless another failure already moved us. */
  failed(pool: Pool): void {
    if (this.pools.length > 1 && this.pool === pool) this.current = (this.current + 1) % this.pools.length
  }

  /**
   * Run one autocommit statement. When the host is unavailable and certainly
   * ran nothing, try the next host at once; otherwise the error is the caller's
   * (a later call goes to the next host).
   */
  async send<T>(fn: (pool: Pool) => Promise<T>): Promise<T> {
    for (let tried = 1; ; tried++) {
      const pool = this.pool
      try {
        return await fn(pool)
      } catch (err) {
        if (!isDbUnavailable(err)) throw err
        this.failed(pool)
        if (tried >= this.pools.length || !nothingRan(err)) throw err
      }
    }
  }
}
