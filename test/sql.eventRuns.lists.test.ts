/**
 * Log retention, run lists and the due query against a real MariaDB: invariants 11 and 14 of
 * docs/contract.md, no starvation, and the start reserve. Every test starts from empty run tables
 * (definitions stay), because findDue / findMissed / list span every run.
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import type { NewRun, RunRow } from '../sql/eventRuns/index.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { listRuns } from '../sql/runPage.ts'
import type { RunStatus } from '../sql/states.ts'
import { useTestDb } from './helpers/db.ts'
import { ids, inFlight, LEASE } from './helpers/eventRuns.ts'
import {
  at,
  countRows,
  type DefinitionFixture,
  makeDefinition,
  makeRun,
  newRun,
  resetRuns,
  stepSpecs,
} from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  await resetRuns(db)
})

const { runningUnleased } = inFlight(() => db)

describe('invariant 11: only terminal runs are eligible for log retention', () => {
  it('terminalBefore returns terminal runs ended before the cutoff; deleteForRuns deletes their logs only', async () => {
    const fx = await makeDefinition(db)
    const made: Record<string, RunRow> = {}
    for (const name of ['completed', 'cancelled', 'failed', 'missed', 'running', 'paused', 'scheduled']) {
      made[name] = await makeRun(db, { definition: fx })
    }
    const r = (name: string) => made[name] as RunRow
    for (const name of ['completed', 'cancelled', 'failed', 'running', 'paused'])
      await runningUnleased(r(name))
    await runs.transition(db, r('completed').id, 'running', 'completed')
    await runs.transition(db, r('cancelled').id, 'running', 'cancelled')
    await runs.transition(db, r('failed').id, 'running', 'failed')
    await runs.transition(db, r('missed').id, 'scheduled', 'missed')
    await runs.transition(db, r('paused').id, 'running', 'paused')
    const terminal = ['completed', 'cancelled', 'failed', 'missed'].map((n) => r(n).id).sort((a, b) => a - b)

    expect(await runs.terminalBefore(db, at(60_000))).toEqual(terminal)
    expect(await runs.terminalBefore(db, at(-60_000))).toEqual([])
    expect(await runs.terminalBefore(db, at(60_000), 2)).toEqual(terminal.slice(0, 2))
    // One ended long ago: only it is before a cutoff an hour back.
    await db.run('UPDATE event_runs SET ended_at = ? WHERE id = ?', [at(-86_400_000), r('failed').id])
    expect(await runs.terminalBefore(db, at(-3_600_000))).toEqual([r('failed').id])

    await logs.appendMany(
      db,
      Object.values(made).flatMap((run) => [
        { runId: run.id, message: 'one' },
        { runId: run.id, message: 'two', level: 'warn' as const },
      ]),
    )
    const eligible = await runs.terminalBefore(db, at(60_000))
    expect(await logs.deleteForRuns(db, eligible)).toBe(8)
    for (const id of terminal) expect(await logs.listForRun(db, id)).toEqual([])
    for (const name of ['running', 'paused', 'scheduled'])
      expect(await logs.listForRun(db, r(name).id)).toHaveLength(2)
    expect(await countRows(db, 'event_runs')).toBe(7)
    expect(await logs.deleteForRuns(db, [])).toBe(0)
  })
})

describe('invariant 14: lists', () => {
  it('is newest first (scheduled_for DESC, id DESC, ties included) and filters by definition and status', async () => {
    const a = await makeDefinition(db)
    const b = await makeDefinition(db)
    const T = Date.now()
    const tie = at(-3_600_000, T)
    const made: RunRow[] = []
    made.push(await makeRun(db, { definition: a, scheduledFor: at(-7_200_000, T) }))
    made.push(await makeRun(db, { definition: a, scheduledFor: tie, scope: 'x' }))
    made.push(await makeRun(db, { definition: b, scheduledFor: at(3_600_000, T) }))
    made.push(await makeRun(db, { definition: b, scheduledFor: tie, scope: 'x' }))
    made.push(await makeRun(db, { definition: a, scheduledFor: tie, scope: 'y' }))
    made.push(await makeRun(db, { definition: a, scheduledFor: at(-10_800_000, T) }))
    const expected = [...made].sort(
      (p, q) => q.scheduledFor.getTime() - p.scheduledFor.getTime() || q.id - p.id,
    )
    const listed = await listRuns(db)
    expect(ids(listed)).toEqual(ids(expected))
    // The three ties come out highest id first.
    const tieIds = listed.filter((r) => r.scheduledFor.getTime() === tie.getTime()).map((r) => r.id)
    expect(tieIds).toEqual([...tieIds].sort((x, y) => y - x))
    expect(tieIds).toHaveLength(3)

    expect(ids(await listRuns(db, { definitionId: b.def.id }))).toEqual(
      ids(expected.filter((r) => r.definitionId === b.def.id)),
    )
    const claimed = made[1] as RunRow
    expect((await runs.claimStart(db, claimed, 'w', LEASE(), at(0, claimed.scheduledFor))).claimed).toBe(true)
    expect(ids(await listRuns(db, { status: 'starting' }))).toEqual([claimed.id])
    expect(ids(await listRuns(db, { status: 'starting', definitionId: b.def.id }))).toEqual([])
    expect(await listRuns(db, { status: 'completed' })).toEqual([])
    const first = listed[0]
    expect(first).toMatchObject({
      definitionSlug: expect.any(String),
      definitionTitle: 'Fixture event',
      versionNumber: 1,
    })
  })

  it('clamps the limit to 1..500 (0 → 1, -5 → 1, 10000 → 500, NaN → 100)', async () => {
    const fx = await makeDefinition(db)
    const base = Date.now() - 86_400_000
    const batch: NewRun[] = Array.from({ length: 600 }, (_, i) =>
      newRun(fx, { scope: '', scheduledFor: at(i * 1000, base) }),
    )
    expect(await runs.materialiseMany(db, batch)).toBe(600)
    expect(await listRuns(db, { limit: 0 })).toHaveLength(1)
    expect(await listRuns(db, { limit: -5 })).toHaveLength(1)
    expect(await listRuns(db, { limit: 10_000 })).toHaveLength(500)
    expect(await listRuns(db, { limit: Number.NaN })).toHaveLength(100)
    expect(await listRuns(db, { limit: Number.POSITIVE_INFINITY })).toHaveLength(100)
    expect(await listRuns(db, {})).toHaveLength(100)
    expect(await listRuns(db, { limit: 7.9 })).toHaveLength(7)
    expect(await listRuns(db, { limit: '3; DROP TABLE event_runs' as unknown as number })).toHaveLength(100)
    expect(await runs.findDue(db, new Date(), 0)).toHaveLength(1)
    expect(await runs.findDue(db, new Date(), 10_000)).toHaveLength(500)
    expect(await runs.findMissed(db, at(86_400_000), -1)).toHaveLength(1)
    expect(await countRows(db, 'event_runs')).toBe(600)
  })

  it('binds hostile status and definitionId values (no injection; the table survives)', async () => {
    const run = await makeRun(db)
    const hostile = "'; DROP TABLE event_runs; --"
    expect(await listRuns(db, { status: hostile as RunStatus })).toEqual([])
    expect(await listRuns(db, { status: "scheduled' OR '1'='1" as RunStatus })).toEqual([])
    expect(await listRuns(db, { definitionId: '0 OR 1=1' as unknown as number })).toEqual([])
    expect(await listRuns(db, { definitionId: hostile as unknown as number })).toEqual([])
    expect(ids(await listRuns(db))).toEqual([run.id])
    expect(await countRows(db, 'event_runs')).toBe(1)
  })
})

describe('no starvation: idle runs leave the due query', () => {
  /** `n` runs of one definition, older than anything due, inserted fast. */
  async function bulkRuns(fx: DefinitionFixture, n: number): Promise<number[]> {
    const base = Date.now() - 7 * 86_400_000
    for (let i = 0; i < n; i += 2000) {
      const chunk = Array.from({ length: Math.min(2000, n - i) }, (_, j) =>
        newRun(fx, { scope: '', scheduledFor: at((i + j) * 1000, base) }),
      )
      expect(await runs.materialiseMany(db, chunk)).toBe(chunk.length)
    }
    const rows = await db.query<{ id: number }>(
      'SELECT id FROM event_runs WHERE definition_id = ? ORDER BY id',
      [fx.def.id],
    )
    const idList = rows.map((r) => Number(r.id))
    expect(idList).toHaveLength(n)
    // One cue step per run through the repository; its state is set below.
    await steps.expand(
      db,
      idList.map((runId) => ({
        runId,
        specs: stepSpecs(1, { kind: 'core.cue', params: { prompt: 'go?' } }),
      })),
    )
    return idList
  }

  async function twentyDue(): Promise<number[]> {
    const fresh = await makeDefinition(db, { graceSeconds: 3600 })
    const T = Date.now()
    const batch = Array.from({ length: 20 }, (_, i) =>
      newRun(fresh, { scope: '', scheduledFor: at(-20_000 + i * 10, T) }),
    )
    expect(await runs.materialiseMany(db, batch)).toBe(20)
    const rows = await db.query<{ id: number }>(
      'SELECT id FROM event_runs WHERE definition_id = ? ORDER BY id',
      [fresh.def.id],
    )
    return rows.map((r) => Number(r.id))
  }

  it('10,000 runs parked on cues: one findDue(now, 50) returns exactly the 20 newly due runs', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    await bulkRuns(fx, 10_000)
    // Raw: the parked state of 10,000 rows at once (no repository bulk-parks).
    await db.run(
      `UPDATE event_runs SET status = 'running', started_at = scheduled_for, wake_at = NULL WHERE definition_id = ?`,
      [fx.def.id],
    )
    await db.run(
      `UPDATE event_run_steps s JOIN event_runs r ON r.id = s.run_id
          SET s.status = 'running', s.parked = 1, s.attempts = 1, s.started_at = r.scheduled_for
        WHERE r.definition_id = ?`,
      [fx.def.id],
    )
    expect((await steps.waitingSummary(db)).count).toBe(10_000)
    const due = await twentyDue()
    const found = await runs.findDue(db, new Date(), 50)
    expect(ids(found)).toEqual(due)
    expect(found.every((r) => r.status === 'scheduled')).toBe(true)
  })

  it('10,000 runs sleeping with wake_at in the future: one findDue(now, 50) returns exactly the 20', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    await bulkRuns(fx, 10_000)
    const later = at(3_600_000)
    await db.run(
      `UPDATE event_runs SET status = 'running', started_at = scheduled_for, wake_at = ? WHERE definition_id = ?`,
      [later, fx.def.id],
    )
    await db.run(
      `UPDATE event_run_steps s JOIN event_runs r ON r.id = s.run_id
          SET s.kind = 'core.wait', s.status = 'running', s.parked = 0, s.attempts = 1, s.wake_at = ?,
              s.started_at = r.scheduled_for
        WHERE r.definition_id = ?`,
      [later, fx.def.id],
    )
    expect((await steps.waitingSummary(db)).count).toBe(0) // timers are never "waiting"
    const due = await twentyDue()
    const found = await runs.findDue(db, new Date(), 50)
    expect(ids(found)).toEqual(due)
    // When the timers end, the sleepers come due (oldest first), ahead of nothing new.
    expect((await runs.findDue(db, at(1, later), 50)).length).toBe(50)
  })
})

describe('the start reserve (migration 0003)', () => {
  const reserve = async (id: number) => {
    const [row] = await db.query<{ n: number | null }>(
      'SELECT LENGTH(start_reserve) AS n FROM event_runs WHERE id = ?',
      [id],
    )
    return row?.n === null || row?.n === undefined ? null : Number(row.n)
  }
  const rowBytes = async (id: number) => {
    const [row] = await db.query<{ n: number }>(
      `SELECT COALESCE(LENGTH(start_reserve), 0) + COALESCE(LENGTH(current_phase), 0)
              + IF(started_at IS NULL, 0, 7) + IF(ended_at IS NULL, 0, 7) + IF(wake_at IS NULL, 0, 7) AS n
         FROM event_runs WHERE id = ?`,
      [id],
    )
    return Number(row?.n)
  }

  it('every new run holds 48 bytes, and its move out of scheduled hands them back, whichever way it leaves', async () => {
    const fx = await makeDefinition(db, { graceSeconds: 3600 })
    const [batch, keyed, missed] = [
      await makeRun(db, { definition: fx, scope: 'batch', scheduledFor: at(-1000) }),
      await makeRun(db, {
        definition: fx,
        scope: 'keyed',
        scheduledFor: at(-1000),
        concurrencyKey: 'reserve',
      }),
      await makeRun(db, { definition: fx, scope: 'missed', scheduledFor: at(-1000) }),
    ]
    for (const r of [batch, keyed, missed]) expect(await reserve(r.id)).toBe(48)
    const before = await rowBytes(batch.id)

    // The start transaction, finishing the run at once: the row does not grow.
    await db.transaction(async (tx) => {
      const locked = await runs.lockDueToStart(tx, new Date(), 10)
      expect(locked.map((r) => r.id)).toContain(batch.id)
      const moved = await runs.markStarted(tx, [batch.id], { status: 'completed', phase: 'main' })
      expect(moved).toBe(1)
    })
    expect(await reserve(batch.id)).toBeNull()
    expect(await rowBytes(batch.id)).toBeLessThanOrEqual(before)

    expect((await runs.claimStart(db, keyed, 'w1', LEASE())).claimed).toBe(true)
    expect(await reserve(keyed.id)).toBeNull()
    expect(await runs.transition(db, missed.id, 'scheduled', 'missed')).toBe(true)
    expect(await reserve(missed.id)).toBeNull()
  })
})
