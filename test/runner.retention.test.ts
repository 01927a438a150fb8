/**
 * Run history retention: terminal runs that ended longer ago than the
 * retention period are deleted with their steps and log lines, in bounded
 * batches of short statements; a run that is not terminal is never deleted,
 * however old; and the runs-by-status counts `/metrics` serves (cached for the
 * terminal statuses) and `health` reads stay right.
 */
import { describe, expect, it } from 'vitest'
import type { SqlValue } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import type { RunStatus } from '../sql/states.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { makeDefinition, newRun, stepSpecs } from './helpers/fixtures.ts'
import { makeRegistry, TestClock } from './helpers/runnerHarness.ts'

const t = useTestDb()
const DAY = 86_400_000

/** `n` runs of one definition due `ageDays` ago, moved to `status` (ended then), each with 3 steps and 2 log lines. */
async function history(n: number, status: RunStatus, ageDays: number, now: number): Promise<number[]> {
  const fx = await makeDefinition(t.db)
  const at = new Date(now - ageDays * DAY)
  await runs.materialiseMany(
    t.db,
    Array.from({ length: n }, (_, i) => newRun(fx, { scope: `${status}-${ageDays}-${i}`, scheduledFor: at })),
  )
  const ids = (
    await t.db.query<{ id: number }>('SELECT id FROM event_runs WHERE definition_id = ? ORDER BY id', [
      fx.def.id,
    ])
  ).map((r) => Number(r.id))
  await steps.expand(
    t.db,
    ids.map((runId) => ({ runId, specs: stepSpecs(3) })),
  )
  await logs.appendMany(
    t.db,
    ids.flatMap((runId) => [
      { runId, message: 'one' },
      { runId, message: 'two' },
    ]),
  )
  // Log lines are written while a run lives, so they are as old as the run.
  await t.db.query(
    `UPDATE event_run_logs SET at = ? WHERE run_id IN (SELECT id FROM event_runs WHERE definition_id = ?)`,
    [at, fx.def.id] as SqlValue[],
  )
  const terminal = ['completed', 'cancelled', 'failed', 'missed'].includes(status)
  await t.db.query(
    `UPDATE event_runs SET status = ?, wake_at = NULL, ended_at = ?, started_at = ? WHERE definition_id = ?`,
    [status, terminal ? at : null, at, fx.def.id] as SqlValue[],
  )
  return ids
}

async function left(ids: number[]) {
  const count = async (table: string, column: string) =>
    Number(
      (
        await t.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM ${table} WHERE ${column} IN (${ids.map(() => '?').join(',')})`,
          ids,
        )
      )[0]?.n,
    )
  return {
    runs: await count('event_runs', 'id'),
    steps: await count('event_run_steps', 'run_id'),
    logs: await count('event_run_logs', 'run_id'),
  }
}

describe('run history retention', () => {
  it('deletes old terminal runs with their steps and logs in bounded batches, never a live one; the counts stay right', async () => {
    const now = Date.now()
    const oldCompleted = await history(300, 'completed', 120, now)
    const oldMissed = await history(100, 'missed', 95, now)
    const oldFailed = await history(50, 'failed', 100, now)
    const oldLive = [...(await history(3, 'running', 200, now)), ...(await history(2, 'paused', 200, now))]
    const recent = await history(20, 'completed', 30, now)

    // The metrics reader has counted (and cached) the terminal statuses before the sweep.
    const counts = createRunCounts(t.db)
    expect((await counts()).completed).toBe(320)

    const deletes: number[] = []
    const db = wrapStatements(t.db, 'runQuery', (real) => async (sql, params) => {
      if (/^DELETE FROM event_runs /.test(sql)) deletes.push((params?.length ?? 1) - 1)
      return real(sql, params)
    })
    const runner = new Runner({
      db,
      registry: makeRegistry(),
      clock: new TestClock(now),
      instanceId: 'retention',
      runRetentionMs: 90 * DAY,
      observer: { runsDeleted: (byStatus) => counts.adjustForDeletedRuns(byStatus) },
    })
    // A sweep stops on its time budget and goes on at the next tick.
    for (let i = 0; i < 5; i++) await runner.tick()

    expect(await left([...oldCompleted, ...oldMissed, ...oldFailed])).toEqual({ runs: 0, steps: 0, logs: 0 })
    expect(await left(oldLive)).toEqual({ runs: 5, steps: 15, logs: 10 })
    expect(await left(recent)).toEqual({ runs: 20, steps: 60, logs: 40 })
    // Bounded: 450 runs in batches of at most 200 ids per statement.
    expect(Math.max(...deletes)).toBeLessThanOrEqual(200)
    expect(deletes.reduce((a, n) => a + n, 0)).toBe(450)

    // What /metrics serves (cached terminal counts, adjusted) equals an exact count, which health reads.
    const exact = await runs.countByStatus(t.db)
    expect(exact).toMatchObject({ completed: 20, missed: 0, failed: 0, running: 3, paused: 2 })
    expect(await counts()).toEqual(exact)
  }, 60_000)

  it('RUN_RETENTION_DAYS=0 keeps every run', async () => {
    const now = Date.now()
    const ancient = await history(5, 'completed', 3000, now)
    const runner = new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(now),
      instanceId: 'retention-off',
      runRetentionMs: 0,
    })
    await runner.tick()
    expect(await left(ancient)).toEqual({ runs: 5, steps: 15, logs: 0 })
  })
})

describe('occurrence override retention', () => {
  it('forgets skips and moves wholly older than the run retention, keeps the rest', async () => {
    const now = Date.now()
    const fx = await makeDefinition(t.db)
    const ago = (days: number) => new Date(now - days * DAY)
    const put = (originalAt: Date, status: 'skipped' | 'moved', movedTo: Date | null) =>
      t.db.query(
        `INSERT INTO occurrence_overrides (definition_id, scope, original_at, status, moved_to, reason, actor)
         VALUES (?, '', ?, ?, ?, 'r', 'op')`,
        [fx.def.id, originalAt, status, movedTo] as SqlValue[],
      )
    await put(ago(120), 'skipped', null) // old: forgotten
    await put(ago(119), 'moved', ago(118)) // old, moved to an old instant: forgotten
    await put(ago(100), 'moved', ago(10)) // moved into the kept window: kept
    await put(ago(30), 'skipped', null) // young: kept
    const runner = new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(now),
      instanceId: 'override-retention',
      runRetentionMs: 90 * DAY,
    })
    await runner.tick()
    const rows = await t.db.query<{ original_at: Date }>(
      'SELECT original_at FROM occurrence_overrides WHERE definition_id = ? ORDER BY original_at',
      [fx.def.id],
    )
    expect(rows.map((r) => Math.round((now - r.original_at.getTime()) / DAY))).toEqual([100, 30])
  })
})
