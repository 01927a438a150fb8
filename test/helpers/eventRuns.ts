/**
 * What the sql.eventRuns.*.test.ts files share: a start claim's lease, run ids in order, and
 * the two ways a test puts a run in flight on its file's database.
 */
import { expect } from 'vitest'
import type { Db } from '../../sql/db.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import { at } from './fixtures.ts'

export const LEASE = () => at(60_000)

export const ids = (rows: readonly { id: number }[]) => rows.map((r) => r.id)

type Startable = { id: number; concurrencyKey: string | null }

/**
 * startRunning and runningUnleased on the database `db()` answers. A getter, not the pool:
 * a file's pool exists only once useTestDb's beforeAll has run.
 */
export function inFlight(db: () => Db) {
  /** Claim a scheduled run and move it to `running`, keeping `owner`'s lease. */
  async function startRunning(run: Startable, owner = 'w1'): Promise<void> {
    const c = await runs.claimStart(db(), run, owner, LEASE())
    expect(c).toEqual({ claimed: true, blockedBy: null })
    expect(await runs.transition(db(), run.id, 'starting', 'running')).toBe(true)
  }

  /** A `running` run with no lease and wake_at now (as after releaseClaim). */
  async function runningUnleased(run: Startable): Promise<void> {
    await startRunning(run, 'setup')
    expect(await runs.releaseClaim(db(), run.id, 'setup')).toBe(true)
  }

  return { startRunning, runningUnleased }
}
