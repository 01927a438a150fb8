/**
 * Bench fixtures: definitions and runs in the states the benchmarks need, made by
 * the real runner (not by hand-written UPDATEs), so a benchmark measures the
 * rows the engine really leaves behind.
 */
import type { Db } from '../sql/db.ts'
import type { DefinitionRow } from '../sql/eventDefinitions.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { systemClock } from '../src/runner/clock.ts'
import { resolveConcurrencyKey } from '../src/runner/newRun.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { sleep } from './lib.ts'

export const CUE_PROGRAM = {
  phases: [
    { name: 'doors', steps: [{ kind: 'core.log', params: { message: 'doors open for {{run.scope}}' } }] },
    { name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Start the show in {{run.scope}}' } }] },
    { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
  ],
}

export interface DefineOptions {
  slug: string
  /** e.g. `room:{{run.scope}}`; null = no key. @default null */
  concurrencyKey?: string | null
  program?: unknown
  graceSeconds?: number
}

export async function defineCueEvent(db: Db, opts: DefineOptions): Promise<DefinitionRow> {
  return createDefinition(
    { db, registry: createDefaultRegistry(), clock: systemClock },
    {
      slug: opts.slug,
      title: `Bench ${opts.slug}`,
      description: 'made by the benchmarks',
      graceSeconds: opts.graceSeconds ?? 7 * 24 * 3600,
      concurrencyKey: opts.concurrencyKey ?? null,
      program: opts.program ?? CUE_PROGRAM,
    },
    'bench',
  )
}

/** Materialise `count` runs of `def`, due at `at` (distinct scopes `${prefix}${i}`); answers their ids. */
export async function materialiseRuns(
  db: Db,
  def: DefinitionRow,
  count: number,
  opts: { at?: Date; prefix?: string } = {},
): Promise<number[]> {
  const at = opts.at ?? new Date()
  const prefix = opts.prefix ?? 's'
  const rows = Array.from({ length: count }, (_, i) => {
    const scope = `${prefix}${i}`
    return {
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope,
      scheduledFor: at,
      timezone: 'UTC',
      concurrencyKey: resolveConcurrencyKey(
        def.concurrencyKey,
        { scope, scheduledFor: at, params: null },
        def,
      ),
      startedBy: 'bench',
    }
  })
  for (let i = 0; i < rows.length; i += 1000) await runs.materialiseMany(db, rows.slice(i, i + 1000))
  const ids = await db.query<{ id: number }>(
    'SELECT id FROM event_runs WHERE definition_id = ? AND scope LIKE ? ORDER BY id',
    [def.id, `${prefix}%`],
  )
  return ids.map((r) => Number(r.id))
}

/** Count of runs of `definitionId` that are running with a parked (cue) step and no lease. */
export async function parkedCount(db: Db, definitionId: number): Promise<number> {
  const [row] = await db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs r
       JOIN event_run_steps s ON s.run_id = r.id AND s.parked = 1 AND s.status = 'running'
      WHERE r.definition_id = ? AND r.status = 'running' AND r.claimed_by IS NULL`,
    [definitionId],
  )
  return Number(row?.n ?? 0)
}

/**
 * Drive every due run of `def` with a fast runner until `count` of them are parked
 * on their cue, then stop it (it releases every claim). Bounded: throws after
 * `timeoutMs`.
 */
export async function driveUntilParked(
  db: Db,
  def: DefinitionRow,
  count: number,
  timeoutMs = 180_000,
): Promise<number> {
  const started = Date.now()
  const runner = new Runner({
    db,
    registry: createDefaultRegistry(),
    tickMs: 10,
    leaseMs: 30_000,
    batchSize: 1000,
    parallelism: 16,
    instanceId: `bench-setup-${def.slug}`,
  })
  runner.start()
  try {
    while ((await parkedCount(db, def.id)) < count) {
      if (Date.now() - started > timeoutMs)
        throw new Error(`${def.slug}: runs not parked within ${timeoutMs} ms`)
      await sleep(100)
    }
  } finally {
    await runner.stop()
  }
  return Date.now() - started
}
