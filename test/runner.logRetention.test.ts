/**
 * The runner's housekeeping sweep: the logs of runs that ended more than the
 * retention period ago go, every other line stays (runs still going, runs
 * ended within the period, even when their first lines are old), and runner
 * instances silent for a week are forgotten.
 */
import { describe, expect, it } from 'vitest'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { countRows, makeDefinition, makeRun } from './helpers/fixtures.ts'

const t = useTestDb()
const DAY = 86_400_000

describe('runner housekeeping', () => {
  it('deletes the logs of runs ended past retention, keeps the rest, forgets instances silent for a week', async () => {
    const T = new Date()
    const ago = (days: number) => new Date(T.getTime() - days * DAY)
    const fx = await makeDefinition(t.db)
    const make = (scope: string) => makeRun(t.db, { definition: fx, scope, scheduledFor: ago(60) })
    const [live, oldEnded, longRun, ended2] = [
      await make('live'),
      await make('old'),
      await make('long'),
      await make('old2'),
    ]
    await runs.transition(t.db, live.id, 'scheduled', 'running', { wakeAt: null })
    for (const r of [oldEnded, longRun, ended2]) await runs.transition(t.db, r.id, 'scheduled', 'completed')
    const endedAt = async (id: number, at: Date) =>
      t.db.run('UPDATE event_runs SET ended_at = ? WHERE id = ?', [at, id])
    await endedAt(oldEnded.id, ago(40))
    await endedAt(ended2.id, ago(31))
    await endedAt(longRun.id, ago(1))
    // Lines in the order they were written, oldest first.
    const line = async (runId: number, at: Date) => {
      await logs.append(t.db, { runId, message: `at ${at.toISOString()}` })
      await t.db.run('UPDATE event_run_logs SET at = ? ORDER BY id DESC LIMIT 1', [at])
    }
    await line(live.id, ago(50))
    await line(oldEnded.id, ago(45))
    await line(oldEnded.id, ago(40))
    await line(longRun.id, ago(35))
    await line(ended2.id, ago(31))
    await line(longRun.id, ago(1))
    await line(live.id, ago(1))

    await t.db.run(
      `INSERT INTO runner_heartbeats (instance_id, host, pid, started_at, last_tick_at)
       VALUES ('silent', 'h', 1, ?, ?), ('recent', 'h', 2, ?, ?)`,
      [ago(10), ago(8), ago(2), ago(1)],
    )

    const runner = new Runner({ db: t.db, registry: createDefaultRegistry(), clock: { now: () => T } })
    await runner.tick()

    expect(await countRows(t.db, 'event_run_logs', 'run_id = ?', [oldEnded.id])).toBe(0)
    expect(await countRows(t.db, 'event_run_logs', 'run_id = ?', [ended2.id])).toBe(0)
    expect(await countRows(t.db, 'event_run_logs', 'run_id = ?', [longRun.id])).toBe(2)
    expect(await countRows(t.db, 'event_run_logs', 'run_id = ?', [live.id])).toBe(2)
    const instances = await t.db.query<{ instance_id: string }>(
      'SELECT instance_id FROM runner_heartbeats ORDER BY instance_id',
    )
    expect(instances.map((r) => r.instance_id)).toEqual(['recent', runner.instanceId].sort())
  })
})
