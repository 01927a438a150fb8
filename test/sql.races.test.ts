/**
 * Claims under real concurrency: several pools on one database, each pool an
 * "instance" with its own connections, racing the same rows.
 *
 * (a) every due run is claimed exactly once, by claimStart and by start transactions
 *     (lockDueToStart + markStarted, what src/runner/start.ts runs);
 * (b) concurrency keys hold across instances: a sampler connection never sees two
 *     key-holding runs with one key, and the claimed intervals never overlap.
 */
import { performance } from 'node:perf_hooks'
import { beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { DB_ERRNO, type Db, isDbErrno, type Queryable } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { useTestDb } from './helpers/db.ts'
import {
  at,
  countRows,
  type DefinitionFixture,
  locks,
  makeDefinition,
  newRun,
  resetRuns,
  shuffled,
  sleepMs,
} from './helpers/fixtures.ts'

let db: Db
const t = useTestDb({ ready: (created) => (db = created.db) })
let fx: DefinitionFixture

beforeAll(async () => {
  // A wide grace window: nothing in these races may become "missed".
  fx = await makeDefinition(db, { graceSeconds: 3600 })
})
beforeEach(async () => {
  await resetRuns(db)
})

/** `n` due runs of the fixture definition, keys from `keyOf`; answers their ids. */
async function dueRuns(n: number, keyOf: (i: number) => string | null = () => null): Promise<number[]> {
  const T = Date.now()
  const batch = Array.from({ length: n }, (_, i) =>
    newRun(fx, { scope: '', scheduledFor: at(-60_000 + i, T), concurrencyKey: keyOf(i) }),
  )
  expect(await runs.materialiseMany(db, batch)).toBe(n)
  const listed = await listRuns(db, { definitionId: fx.def.id, limit: 500 })
  expect(listed).toHaveLength(n)
  return listed.map((r) => r.id).sort((a, b) => a - b)
}

function instances(n: number, connectionLimit: number): Db[] {
  return Array.from({ length: n }, () => t.open({ connectionLimit }))
}

describe('race (a): every due run is claimed exactly once', () => {
  it('8 instances × claimStart over the same 300 key-less runs, each in its own shuffled order', async () => {
    const ids = await dueRuns(300)
    const pools = instances(8, 1)
    const winners = new Map<number, string[]>()
    const started = performance.now()
    const trues = await Promise.all(
      pools.map(async (pool, i) => {
        const owner = `inst-${i}`
        let won = 0
        for (const id of shuffled(ids)) {
          const res = await runs.claimStart(pool, { id, concurrencyKey: null }, owner, at(60_000))
          expect(res.blockedBy).toBeNull()
          if (res.claimed) {
            won++
            winners.set(id, [...(winners.get(id) ?? []), owner])
          }
        }
        return won
      }),
    )
    const ms = performance.now() - started
    expect(trues.reduce((a, b) => a + b, 0)).toBe(300)
    expect(winners.size).toBe(300)
    for (const [, owners] of winners) expect(owners).toHaveLength(1)
    const rows = await db.query<{ id: number; status: string; claimed_by: string }>(
      'SELECT id, status, claimed_by FROM event_runs ORDER BY id',
    )
    expect(rows).toHaveLength(300)
    for (const r of rows) {
      expect(r.status).toBe('starting')
      expect([r.claimed_by]).toEqual(winners.get(Number(r.id)))
    }
    // More than one instance won something: the race was real.
    expect(trues.filter((n) => n > 0).length).toBeGreaterThan(1)
    console.info(
      `race a/claimStart: 2400 claims in ${ms.toFixed(0)} ms, wins per instance ${trues.join(',')}`,
    )
  })

  it('8 instances × start transactions of 5 over the same 300 runs: every run started by exactly one', async () => {
    const ids = await dueRuns(300)
    const pools = instances(8, 1)
    const byBatch = new Map<string, { owner: string; ids: number[] }>()
    let deadlocks = 0
    const started = performance.now()
    await Promise.all(
      pools.map(async (pool, i) => {
        const owner = `inst-${i}`
        for (let k = 0; ; k++) {
          const token = `${owner}-b${k}`
          let mine: number[]
          try {
            mine = await pool.transaction(
              async (tx) => {
                const rows = await runs.lockDueToStart(tx, new Date(), 5)
                const as = {
                  status: 'running',
                  phase: 'main',
                  owner,
                  token,
                  leaseUntil: at(60_000),
                  leaseMs: 60_000,
                } as const
                // Held locks make the guarded move total: all or a bug.
                expect(
                  await runs.markStarted(
                    tx,
                    rows.map((r) => r.id),
                    as,
                  ),
                ).toBe(rows.length)
                return rows.map((r) => r.id)
              },
              { isolation: 'READ COMMITTED' },
            )
          } catch (err) {
            // InnoDB may still pick a victim among writers of one index; it rolled
            // it back whole, so starting again is safe (the runner retries too).
            if (isDbErrno(err, DB_ERRNO.LOCK_DEADLOCK)) {
              deadlocks++
              continue
            }
            throw err
          }
          if (mine.length === 0) return
          expect(mine.length).toBeLessThanOrEqual(5)
          byBatch.set(token, { owner, ids: mine })
        }
      }),
    )
    const ms = performance.now() - started
    const claimed = [...byBatch.values()].flatMap((b) => b.ids)
    expect(claimed).toHaveLength(300)
    expect(new Set(claimed).size).toBe(300)
    expect([...claimed].sort((a, b) => a - b)).toEqual(ids)
    const rows = await db.query<{ id: number; status: string; claimed_by: string; claim_token: string }>(
      'SELECT id, status, claimed_by, claim_token FROM event_runs ORDER BY id',
    )
    for (const r of rows) {
      expect(r.status).toBe('running')
      const batch = byBatch.get(r.claim_token)
      expect(batch?.owner).toBe(r.claimed_by)
      expect(batch?.ids).toContain(Number(r.id))
    }
    const owners = new Set([...byBatch.values()].map((b) => b.owner))
    expect(owners.size).toBeGreaterThan(1)
    console.info(
      `race a/start: ${byBatch.size} batches in ${ms.toFixed(0)} ms across ${owners.size} instances, ${deadlocks} deadlock retries`,
    )
  })
})

describe('race (b): concurrency keys hold across instances', () => {
  it('4 instances start 50 runs sharing 5 keys: never two holders of one key, all 50 complete', async () => {
    const KEYS = 5
    const keyOf = (i: number) => `world-${i % KEYS}`
    const ids = await dueRuns(50, keyOf)
    const keyById = new Map(
      (await listRuns(db, { definitionId: fx.def.id, limit: 500 })).map((r) => [r.id, r.concurrencyKey]),
    )
    const pools = instances(4, 2)
    const sampler = t.open({ connectionLimit: 1 })

    const intervals: { key: string; runId: number; owner: string; start: number; end: number }[] = []
    const violations: unknown[] = []
    const transitionFailures: unknown[] = []
    let blocked = 0
    let samples = 0
    let done = false
    const deadline = Date.now() + 45_000

    const sampling = (async () => {
      while (!done) {
        const rows = await sampler.query(
          `SELECT concurrency_key, COUNT(*) AS n FROM event_runs
            WHERE status IN ('starting','running','paused','ending') AND concurrency_key IS NOT NULL
            GROUP BY concurrency_key HAVING COUNT(*) > 1`,
        )
        samples++
        if (rows.length > 0) violations.push(...rows)
        await sleepMs(5)
      }
    })()

    const started = performance.now()
    const workers = pools.map(async (pool, i) => {
      const owner = `inst-${i}`
      while (Date.now() < deadline) {
        const counts = await runs.countByStatus(pool)
        if (counts.completed + counts.failed + counts.cancelled + counts.missed === 50) return
        const due = await runs.findDue(pool, new Date(), 50)
        let claimedAny = false
        for (const r of shuffled(due)) {
          if (r.status !== 'scheduled') continue
          const res = await runs.claimStart(pool, r, owner, at(60_000))
          if (res.blockedBy !== null) {
            blocked++
            // The named holder holds the same key.
            expect(keyById.get(res.blockedBy)).toBe(r.concurrencyKey)
          }
          if (!res.claimed) continue
          claimedAny = true
          const start = performance.now() // after the claim committed
          await sleepMs(Math.floor(Math.random() * 21))
          const end = performance.now() // before the release is sent
          intervals.push({ key: r.concurrencyKey as string, runId: r.id, owner, start, end })
          const ok = await runs.transition(pool, r.id, 'starting', 'completed').catch((err: unknown) => {
            transitionFailures.push(err)
            return false
          })
          if (!ok) transitionFailures.push(`transition of ${r.id} answered false`)
        }
        if (!claimedAny) await sleepMs(1 + Math.floor(Math.random() * 3))
      }
      throw new Error(`${owner} gave up: runs did not all finish within the deadline`)
    })
    try {
      await Promise.all(workers)
    } finally {
      done = true
      await sampling
    }
    const ms = performance.now() - started

    expect(transitionFailures).toEqual([])
    expect(violations).toEqual([])
    expect(samples).toBeGreaterThan(5)
    // The in-process record: per key, no two claimed intervals overlap.
    for (let k = 0; k < KEYS; k++) {
      const mine = intervals.filter((x) => x.key === `world-${k}`).sort((a, b) => a.start - b.start)
      expect(mine).toHaveLength(50 / KEYS)
      for (let j = 1; j < mine.length; j++) {
        expect(mine[j]?.start).toBeGreaterThanOrEqual(mine[j - 1]?.end as number)
      }
    }
    expect(intervals.map((x) => x.runId).sort((a, b) => a - b)).toEqual(ids)
    expect(blocked).toBeGreaterThan(0) // the keys really were contended
    expect(await countRows(db, 'event_runs', "status = 'completed'")).toBe(50)
    expect((await locks(db)).size).toBe(0)
    expect(new Set(intervals.map((x) => x.owner)).size).toBeGreaterThan(1)
    console.info(
      `race b: 50 keyed runs in ${ms.toFixed(0)} ms, ${blocked} blocked claims, ${samples} sampler polls, wins by ${[
        ...new Set(intervals.map((x) => x.owner)),
      ].join(',')}`,
    )
  })
})

describe('a transaction picked as a deadlock victim', () => {
  /**
   * Two transactions lock two rows in opposite orders, each waiting until the
   * other holds its first row: InnoDB must roll one back. Answers how often each
   * body ran and what each transaction ended with.
   */
  async function deadlock(retryable?: boolean) {
    await db.query('CREATE TABLE IF NOT EXISTS race_pair (id INT PRIMARY KEY, n INT NOT NULL)')
    await db.query('REPLACE INTO race_pair VALUES (1, 0), (2, 0)')
    const [a, b] = instances(2, 1) as [Db, Db]
    const calls: [number, number] = [0, 0]
    const holding: [boolean, boolean] = [false, false]
    const body = (me: 0 | 1) => async (tx: Queryable) => {
      calls[me]++
      const [first, second] = me === 0 ? [1, 2] : [2, 1]
      await tx.query('UPDATE race_pair SET n = n + 1 WHERE id = ?', [first])
      holding[me] = true
      // Only the first attempts meet: a retry runs straight through.
      if (calls[me] === 1) while (!holding[me === 0 ? 1 : 0]) await sleepMs(5)
      await tx.query('UPDATE race_pair SET n = n + 1 WHERE id = ?', [second])
    }
    const results = await Promise.allSettled([
      a.transaction(body(0), { retryable }),
      b.transaction(body(1), { retryable }),
    ])
    return { calls, results }
  }

  it('is run again from the start when the caller allows it, and both commit', async () => {
    const { calls, results } = await deadlock(true)
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled'])
    expect(calls[0] + calls[1]).toBe(3)
    const rows = await db.query<{ n: number }>('SELECT n FROM race_pair ORDER BY id')
    expect(rows.map((r) => Number(r.n))).toEqual([2, 2])
  })

  it('is reported to the caller by default', async () => {
    const { calls, results } = await deadlock()
    expect(calls).toEqual([1, 1])
    const rejected = results.filter((r) => r.status === 'rejected')
    expect(rejected).toHaveLength(1)
    expect(isDbErrno((rejected[0] as PromiseRejectedResult).reason, DB_ERRNO.LOCK_DEADLOCK)).toBe(true)
  })
})
