/**
 * No foreign key ties a run's rows to it (migration 0024), so every path that
 * deletes runs deletes their steps, the steps' cue ladders and answer links,
 * their log lines and bulk memberships first. Each path here deletes runs that
 * have all of those, beside runs it must keep, and no row is left whose run
 * (or step) is gone, while the kept runs keep every row.
 */
import { describe, expect, it } from 'vitest'
import * as bulk from '../sql/bulkActions.ts'
import * as ladders from '../sql/cueLadders.ts'
import type { SqlValue } from '../sql/db.ts'
import * as definitions from '../sql/eventDefinitions.ts'
import * as logs from '../sql/eventRunLogs.ts'
import { deleteRunChildren } from '../sql/eventRuns/children.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import * as links from '../sql/notifications/cueLinks.ts'
import type { RunStatus } from '../sql/states.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { type DefinitionFixture, makeDefinition, newRun, stepSpecs } from './helpers/fixtures.ts'
import { makeRegistry, TestClock } from './helpers/runnerHarness.ts'

const t = useTestDb()
const DAY = 86_400_000

/** Rows of each child table whose parent row is gone. */
async function orphans(): Promise<Record<string, number>> {
  const count = async (sql: string) => Number((await t.db.query<{ n: number }>(sql))[0]?.n)
  return {
    steps: await count(
      'SELECT COUNT(*) AS n FROM event_run_steps s LEFT JOIN event_runs r ON r.id = s.run_id WHERE r.id IS NULL',
    ),
    logs: await count(
      'SELECT COUNT(*) AS n FROM event_run_logs l LEFT JOIN event_runs r ON r.id = l.run_id WHERE r.id IS NULL',
    ),
    ladders: await count(
      `SELECT COUNT(*) AS n FROM cue_ladders c LEFT JOIN event_run_steps s ON s.id = c.step_id
        LEFT JOIN event_runs r ON r.id = c.run_id WHERE s.id IS NULL OR r.id IS NULL`,
    ),
    links: await count(
      'SELECT COUNT(*) AS n FROM cue_links k LEFT JOIN event_run_steps s ON s.id = k.step_id WHERE s.id IS NULL',
    ),
    bulk: await count(
      'SELECT COUNT(*) AS n FROM bulk_action_runs b LEFT JOIN event_runs r ON r.id = b.run_id WHERE r.id IS NULL',
    ),
    retries: await count(
      `SELECT COUNT(*) AS n FROM event_run_retries x LEFT JOIN event_runs o ON o.id = x.original_id
        LEFT JOIN event_runs r ON r.id = x.run_id WHERE o.id IS NULL OR r.id IS NULL`,
    ),
  }
}
const NONE = { steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0, retries: 0 }

/** Every row of these runs, per table. */
async function rowsOf(ids: number[]): Promise<Record<string, number>> {
  if (ids.length === 0) return { runs: 0, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 }
  const inIds = `(${ids.map(() => '?').join(', ')})`
  const count = async (sql: string) => Number((await t.db.query<{ n: number }>(sql, ids))[0]?.n)
  return {
    runs: await count(`SELECT COUNT(*) AS n FROM event_runs WHERE id IN ${inIds}`),
    steps: await count(`SELECT COUNT(*) AS n FROM event_run_steps WHERE run_id IN ${inIds}`),
    logs: await count(`SELECT COUNT(*) AS n FROM event_run_logs WHERE run_id IN ${inIds}`),
    ladders: await count(`SELECT COUNT(*) AS n FROM cue_ladders WHERE run_id IN ${inIds}`),
    links: await count(
      `SELECT COUNT(*) AS n FROM cue_links k JOIN event_run_steps s ON s.id = k.step_id WHERE s.run_id IN ${inIds}`,
    ),
    bulk: await count(`SELECT COUNT(*) AS n FROM bulk_action_runs WHERE run_id IN ${inIds}`),
  }
}

/**
 * `n` runs of `fx` due at `at`, each with 2 steps (the first a cue with its
 * ladder and two answer links), 2 log lines and a bulk membership, then moved
 * to `status` (ended at `at` when terminal). `withSteps: false` for runs that
 * never started (a scheduled run has log lines, e.g. why a key held it, and no steps).
 */
async function madeRuns(
  fx: DefinitionFixture,
  n: number,
  status: RunStatus,
  at: Date,
  opts: { withSteps?: boolean; startedBy?: string } = {},
): Promise<number[]> {
  const tag = `${status}-${at.getTime()}-${Math.random().toString(36).slice(2, 8)}`
  await runs.materialiseMany(
    t.db,
    Array.from({ length: n }, (_, i) => newRun(fx, { scope: `${tag}-${i}`, scheduledFor: at })),
  )
  const ids = (
    await t.db.query<{ id: number }>('SELECT id FROM event_runs WHERE scope LIKE ? ORDER BY id', [`${tag}-%`])
  ).map((r) => Number(r.id))
  if (opts.withSteps !== false) {
    await steps.expand(
      t.db,
      ids.map((runId) => ({ runId, specs: stepSpecs(2) })),
    )
    const first = await t.db.query<{ id: number; run_id: number }>(
      `SELECT id, run_id FROM event_run_steps WHERE seq = 0 AND run_id IN (${ids.map(() => '?').join(', ')})`,
      ids,
    )
    await ladders.openMany(
      t.db,
      first.map((s) => ({
        stepId: Number(s.id),
        runId: Number(s.run_id),
        prompt: 'Open the gates',
        openedAt: at,
        deadlineAt: null,
        assignees: ['gm'],
        exclusive: false,
      })),
    )
    for (const s of first)
      for (const channel of ['slack', 'mail'])
        await links.create(t.db, `${s.id}-${channel}`.padEnd(64, '0'), Number(s.id), channel)
  }
  await logs.appendMany(
    t.db,
    ids.flatMap((runId) => [
      { runId, message: 'one' },
      { runId, message: 'two' },
    ]),
  )
  const bulkId = await bulk.create(t.db, { action: 'pause', actor: 'test', reason: null, filter: {} })
  await bulk.addRuns(t.db, bulkId, ids)
  // Each run after the first is the retry of the one before it (as the record
  // alone: a retry's own status path is test/retry.onePerOriginal.test.ts).
  for (let i = 1; i < ids.length; i++)
    await t.db.run('INSERT INTO event_run_retries (original_id, run_id) VALUES (?, ?)', [
      ids[i - 1] as number,
      ids[i] as number,
    ])
  const terminal = ['completed', 'cancelled', 'failed', 'missed'].includes(status)
  await t.db.query(
    `UPDATE event_runs SET status = ?, wake_at = NULL, ended_at = ?, started_at = ?, started_by = ?
      WHERE id IN (${ids.map(() => '?').join(', ')})`,
    [
      status,
      terminal ? at : null,
      status === 'scheduled' ? null : at,
      opts.startedBy ?? 'schedule',
      ...ids,
    ] as SqlValue[],
  )
  return ids
}

describe('deleting runs leaves no orphan rows', () => {
  it('retention: old terminal runs go with every row of theirs, the rest keep theirs', async () => {
    const now = Date.now()
    const fx = await makeDefinition(t.db)
    const old = [
      ...(await madeRuns(fx, 30, 'completed', new Date(now - 120 * DAY))),
      ...(await madeRuns(fx, 10, 'failed', new Date(now - 100 * DAY))),
    ]
    const live = await madeRuns(fx, 3, 'running', new Date(now - 200 * DAY))
    const recent = await madeRuns(fx, 5, 'completed', new Date(now - 10 * DAY))
    const runner = new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(now),
      instanceId: 'retention',
      runRetentionMs: 90 * DAY,
    })
    for (let i = 0; i < 3; i++) await runner.tick()

    expect(await rowsOf(old)).toEqual({ runs: 0, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 })
    expect(await rowsOf(live)).toEqual({ runs: 3, steps: 6, logs: 6, ladders: 3, links: 6, bulk: 3 })
    expect(await rowsOf(recent)).toEqual({ runs: 5, steps: 10, logs: 10, ladders: 5, links: 10, bulk: 5 })
    expect(await orphans()).toEqual(NONE)
  })

  it('a delete cut short after the children leaves runs without rows, never rows without runs', async () => {
    const fx = await makeDefinition(t.db)
    const ids = await madeRuns(fx, 4, 'completed', new Date(Date.now() - 200 * DAY))
    await deleteRunChildren(t.db, { ids })
    expect(await rowsOf(ids)).toEqual({ runs: 4, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 })
    expect(await orphans()).toEqual(NONE)
    // The next delete of those runs (here retention's) finishes the job.
    expect(
      await runs.deleteTerminalRuns(
        t.db,
        ids.map((id) => ({ id, status: 'completed' as const })),
      ),
    ).toEqual({
      completed: 4,
    })
    expect(await rowsOf(ids)).toMatchObject({ runs: 0 })
    expect(await orphans()).toEqual(NONE)
  })

  it('retention guards every child delete on the run still being terminal', async () => {
    const fx = await makeDefinition(t.db)
    const ids = await madeRuns(fx, 2, 'running', new Date(Date.now() - 200 * DAY))
    // Chosen as terminal, moving again by now: nothing of theirs goes.
    expect(
      await runs.deleteTerminalRuns(
        t.db,
        ids.map((id) => ({ id, status: 'failed' as const })),
      ),
    ).toEqual({})
    expect(await rowsOf(ids)).toEqual({ runs: 2, steps: 4, logs: 4, ladders: 2, links: 4, bulk: 2 })
  })

  it('pausing and archiving a definition: its never-started schedule runs go with their log lines', async () => {
    const now = Date.now()
    const paused = await makeDefinition(t.db)
    const archived = await makeDefinition(t.db)
    const future = new Date(now + DAY)
    const doomed = [
      ...(await madeRuns(paused, 5, 'scheduled', future, { withSteps: false })),
      ...(await madeRuns(archived, 5, 'scheduled', future, { withSteps: false })),
    ]
    const kept = [
      ...(await madeRuns(paused, 2, 'completed', new Date(now - DAY))),
      ...(await madeRuns(paused, 2, 'scheduled', future, { withSteps: false, startedBy: 'operator:gm' })),
    ]
    expect(await definitions.setState(t.db, paused.def.id, 'paused')).toMatchObject({
      applied: true,
      withdrawn: 5,
    })
    expect(await definitions.setState(t.db, archived.def.id, 'archived')).toMatchObject({
      applied: true,
      withdrawn: 5,
    })
    expect(await rowsOf(doomed)).toEqual({ runs: 0, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 })
    expect(await rowsOf(kept)).toEqual({ runs: 4, steps: 4, logs: 8, ladders: 2, links: 4, bulk: 4 })
    expect(await orphans()).toEqual(NONE)
  })

  it('withdrawing scheduled runs (a skip, a blackout) takes their rows, never a started run’s', async () => {
    const fx = await makeDefinition(t.db)
    const future = new Date(Date.now() + 2 * DAY)
    const doomed = await madeRuns(fx, 3, 'scheduled', future, { withSteps: false })
    const started = await madeRuns(fx, 2, 'running', future)
    const gone = await t.db.transaction((tx) => runs.withdrawScheduled(tx, [...doomed, ...started]))
    expect(gone).toBe(3)
    expect(await rowsOf(doomed)).toEqual({ runs: 0, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 })
    expect(await rowsOf(started)).toEqual({ runs: 2, steps: 4, logs: 4, ladders: 2, links: 4, bulk: 2 })
    expect(await orphans()).toEqual(NONE)
  })

  it('log retention deletes an old line whose run is gone (written as its run was deleted), and keeps a live run’s', async () => {
    const now = Date.now()
    const fx = await makeDefinition(t.db)
    const [live] = await madeRuns(fx, 1, 'running', new Date(now - 60 * DAY))
    const [gone] = await madeRuns(fx, 1, 'scheduled', new Date(now - 60 * DAY), { withSteps: false })
    // The race a foreign key refused: a note for a run deleted a moment before.
    await t.db.run('DELETE FROM event_run_logs WHERE run_id = ?', [gone as number])
    await t.db.run('DELETE FROM bulk_action_runs WHERE run_id = ?', [gone as number])
    await t.db.run('DELETE FROM event_runs WHERE id = ?', [gone as number])
    await logs.append(t.db, { runId: gone as number, message: 'held by a key' })
    await t.db.run('UPDATE event_run_logs SET at = ? WHERE run_id IN (?, ?)', [
      new Date(now - 60 * DAY),
      live as number,
      gone as number,
    ])
    expect(await orphans()).toMatchObject({ logs: 1 })
    const runner = new Runner({ db: t.db, registry: makeRegistry(), clock: new TestClock(now) })
    await runner.tick()
    expect(await orphans()).toEqual(NONE)
    expect(await rowsOf([live as number])).toMatchObject({ runs: 1, logs: 2 })
  })

  it('the child deletes read each child table by its run index, not the whole table', async () => {
    const fx = await makeDefinition(t.db)
    await madeRuns(fx, 50, 'completed', new Date(Date.now() - 10 * DAY))
    const ids = await madeRuns(fx, 3, 'completed', new Date(Date.now() - 200 * DAY))
    const scanned = await t.db.transaction(async (tx) => {
      const read = async () =>
        Number(
          (await tx.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'"))[0]?.Value,
        )
      const before = await read()
      await runs.deleteTerminalRuns(
        tx,
        ids.map((id) => ({ id, status: 'completed' as const })),
      )
      // SHOW STATUS itself reads a temporary table's rows: measured alone and taken off.
      const between = await read()
      const idle = (await read()) - between
      return between - before - idle
    })
    expect(scanned).toBe(0)
    expect(await rowsOf(ids)).toEqual({ runs: 0, steps: 0, logs: 0, ladders: 0, links: 0, bulk: 0 })
  })
})
