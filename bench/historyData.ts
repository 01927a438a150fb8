/**
 * A database a year in: five scheduled definitions, `finished` terminal runs
 * (one completed step each, 7 s apart, going back in time: a million of them
 * span 81 days, inside the default 90-day run retention, so no sweep has work; mostly completed,
 * some failed, cancelled, missed, one in fifty degraded), the log as retention
 * leaves it (lines of the last 29 days only: nothing for a first sweep to
 * delete), `ahead` runs scheduled 1 h onwards, made an hour ago, and three runs
 * parked on a cue (one of them degraded), which an idle instance leaves alone. Inserted set-wise from MariaDB's sequence engine
 * (`seq_1_to_N`), in slices, so a million runs take a minute or two, not an hour.
 *
 * The definitions are marked materialised two days ahead, so the runner finds
 * nothing to materialise: the instance is idle.
 */
import type { Db } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { systemClock } from '../src/runner/clock.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'

/** How many of each the database should hold. */
export interface HistoryShape {
  finished: number
  ahead: number
}

const SLICE = 200_000

const PROGRAM = {
  phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'show for {{run.scope}}' } }] }],
}

/** Fill an empty, migrated database; answers the definitions' ids. */
export async function fillHistory(db: Db, shape: HistoryShape, now = new Date()): Promise<number[]> {
  const deps = { db, registry: createDefaultRegistry(), clock: systemClock }
  const defs: number[] = []
  const versions: number[] = []
  for (let i = 0; i < 5; i++) {
    const def = await createDefinition(
      deps,
      {
        slug: `history-${i}`,
        title: `History ${i}`,
        description: 'a year of shows',
        schedule: '*/5 * * * *',
        timezone: 'UTC',
        graceSeconds: 300 + 60 * i,
        concurrencyKey: null,
        scopes: [''],
        program: PROGRAM,
      },
      'bench',
    )
    defs.push(def.id)
    versions.push(def.currentVersionId as number)
  }
  await db.run('UPDATE event_definitions SET materialized_through = ? + INTERVAL 2 DAY', [now])
  // Materialisation keeps a watermark per (definition, scope): mark those too.
  for (const id of defs)
    await db.run(
      `INSERT INTO schedule_watermarks (definition_id, scope, materialized_through) VALUES (?, '', ? + INTERVAL 2 DAY)`,
      [id, now],
    )
  const d = defs.join(', ')
  const v = versions.join(', ')
  for (let from = 1; from <= shape.finished; from += SLICE) {
    const to = Math.min(shape.finished, from + SLICE - 1)
    await db.runQuery(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, status, health,
              current_phase, started_by, started_at, ended_at, created_at, updated_at, start_reserve)
       SELECT ELT(1 + seq % 5, ${d}), ELT(1 + seq % 5, ${v}), '', ? - INTERVAL seq * 7 SECOND, 'UTC',
              ELT(1 + seq % 10, 'completed', 'completed', 'completed', 'completed', 'completed',
                  'completed', 'completed', 'failed', 'cancelled', 'missed'),
              IF(seq % 50 = 0, 'degraded', 'ok'), 'main', 'schedule',
              ? - INTERVAL seq * 7 SECOND, ? - INTERVAL seq * 7 - 2 SECOND,
              ? - INTERVAL seq * 7 + 3600 SECOND, ? - INTERVAL seq * 7 - 2 SECOND, NULL
         FROM seq_${from}_to_${to}`,
      // updated_at as the service leaves a finished run: last written when it ended.
      [now, now, now, now, now],
    )
  }
  await db.runQuery(
    `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, kind, status, attempts, started_at, ended_at)
     SELECT id, 0, 0, 'main', 'core.log', 'completed', 1, started_at, ended_at
       FROM event_runs WHERE status IN ('completed', 'failed')`,
  )
  await db.runQuery(
    `INSERT INTO event_run_logs (run_id, at, level, message)
     SELECT id, ended_at, 'info', 'finished' FROM event_runs
      WHERE ended_at >= ? - INTERVAL 29 DAY ORDER BY ended_at, id`,
    [now],
  )
  if (shape.ahead > 0) {
    await db.runQuery(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, started_by,
              missed_at, created_at, updated_at)
       SELECT ELT(1 + seq % 5, ${d}), ELT(1 + seq % 5, ${v}), CONCAT('ahead-', seq),
              ? + INTERVAL 3600 + seq SECOND, 'UTC', 'schedule',
              ? + INTERVAL 3900 + seq SECOND, ? - INTERVAL 1 HOUR, ? - INTERVAL 1 HOUR
         FROM seq_1_to_${Math.floor(shape.ahead)}`,
      [now, now, now, now],
    )
  }
  for (let i = 0; i < 3; i++) {
    const id = await runs.materialise(db, {
      definitionId: defs[i] as number,
      versionId: versions[i] as number,
      scope: `parked-${i}`,
      scheduledFor: new Date(now.getTime() - 3600_000),
      timezone: 'UTC',
      concurrencyKey: null,
    })
    if (id === null) throw new Error('fillHistory: a parked run already existed')
    await runs.transition(db, id, 'scheduled', 'running', { wakeAt: null, phase: 'main' })
    if (i === 0) await runs.setHealth(db, id, 'degraded')
    await db.run(
      `INSERT INTO event_run_steps (run_id, seq, phase_index, phase, kind, status, parked, attempts, started_at)
       VALUES (?, 0, 0, 'main', 'core.cue', 'running', 1, 1, ?)`,
      [id, new Date(now.getTime() - 3000_000)],
    )
  }
  await db.runQuery('ANALYZE TABLE event_runs, event_run_steps, event_run_logs')
  return defs
}
