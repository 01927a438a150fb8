/**
 * Per-request DataLoaders: every "field of each item in a list" read goes
 * through one of these, so a list of 500 runs with their definitions, versions
 * and steps costs one statement per kind of thing, not one per run. Built fresh
 * per operation: nothing is cached across requests (or across users).
 */
import DataLoader from 'dataloader'
import type { LadderRow } from '../../sql/cueLadders.ts'
import * as cueLadders from '../../sql/cueLadders.ts'
import type { Queryable } from '../../sql/db.ts'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { LogRow } from '../../sql/eventRunLogs.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import type { VersionRow } from '../../sql/eventVersions.ts'
import * as versions from '../../sql/eventVersions.ts'

/** Keys per statement: keeps IN lists (and packets) bounded however long a list is. */
const MAX_BATCH = 1000

type KeyHolder = Awaited<ReturnType<typeof runs.holdersOfKeys>>[number]

export interface Loaders {
  run: DataLoader<number, RunListRow | null>
  /**
   * Runs this request already read (a list page): {@link Loaders.run} answers
   * them without a query. Cheaper than `run.prime` per row, which allocates a
   * resolved promise for each of up to 500 runs that are rarely loaded again.
   */
  rememberRuns(list: readonly RunListRow[]): void
  definition: DataLoader<number, DefinitionRow | null>
  version: DataLoader<number, VersionRow | null>
  /**
   * A definition or version this request has already read, or undefined. A
   * field of each run in a list answers from here without a promise per run:
   * 500 runs awaiting the same three definitions made half the garbage of a
   * `runs(limit: 500)` request.
   */
  knownDefinition(id: number): DefinitionRow | undefined
  knownVersion(id: number): VersionRow | undefined
  /** Read now, one statement each, the definitions and/or versions a list of runs points at. */
  preloadParents(
    list: readonly { definitionId: number; versionId: number }[],
    which: { definitions: boolean; versions: boolean },
  ): Promise<void>
  stepsByRun: DataLoader<number, StepRow[]>
  versionsByDefinition: DataLoader<number, VersionRow[]>
  /** Runs holding a concurrency key now, by key. */
  keyHolders: DataLoader<string, KeyHolder[]>
  /** A cue step's ladder, by step id (null before the cue first parks). */
  cueLadder: DataLoader<number, LadderRow | null>
  /** A run's newest `limit` log lines; one loader per distinct limit in the request. */
  logsByRun(limit: number): DataLoader<number, LogRow[]>
}

function byId<K, T>(rows: readonly T[], keys: readonly K[], keyOf: (row: T) => K): (T | null)[] {
  const map = new Map<K, T>()
  for (const row of rows) map.set(keyOf(row), row)
  return keys.map((k) => map.get(k) ?? null)
}

function grouped<K, T>(rows: readonly T[], keys: readonly K[], keyOf: (row: T) => K): T[][] {
  const map = new Map<K, T[]>()
  for (const k of keys) map.set(k, [])
  for (const row of rows) map.get(keyOf(row))?.push(row)
  return keys.map((k) => map.get(k) ?? [])
}

export function createLoaders(db: Queryable): Loaders {
  const opts = { maxBatchSize: MAX_BATCH }
  const logLoaders = new Map<number, DataLoader<number, LogRow[]>>()
  const knownRuns = new Map<number, RunListRow>()
  const knownDefinitions = new Map<number, DefinitionRow>()
  const knownVersions = new Map<number, VersionRow>()
  const remember = <T extends { id: number }>(known: Map<number, T>, rows: T[]): T[] => {
    for (const row of rows) known.set(row.id, row)
    return rows
  }
  const definition = new DataLoader<number, DefinitionRow | null>(
    async (ids) => byId(remember(knownDefinitions, await definitions.getByIds(db, ids)), ids, (d) => d.id),
    opts,
  )
  const version = new DataLoader<number, VersionRow | null>(
    async (ids) => byId(remember(knownVersions, await versions.getByIds(db, ids)), ids, (v) => v.id),
    opts,
  )
  /** The distinct ids of `list` not read yet, or none when `wanted` is false. */
  const unread = (wanted: boolean, ids: () => number[], known: Map<number, unknown>) =>
    wanted ? [...new Set(ids())].filter((id) => !known.has(id)) : []
  return {
    run: new DataLoader(async (ids) => {
      const missing = knownRuns.size === 0 ? ids : ids.filter((id) => !knownRuns.has(id))
      const fetched = missing.length === 0 ? [] : await runs.getByIds(db, missing)
      const found = byId(fetched, ids, (r) => r.id)
      return ids.map((id, i) => knownRuns.get(id) ?? found[i] ?? null)
    }, opts),
    rememberRuns(list) {
      for (const run of list) knownRuns.set(run.id, run)
    },
    definition,
    version,
    knownDefinition: (id) => knownDefinitions.get(id),
    knownVersion: (id) => knownVersions.get(id),
    async preloadParents(list, which) {
      const defIds = unread(which.definitions, () => list.map((r) => r.definitionId), knownDefinitions)
      const versionIds = unread(which.versions, () => list.map((r) => r.versionId), knownVersions)
      await Promise.all([
        defIds.length > 0 && definition.loadMany(defIds),
        versionIds.length > 0 && version.loadMany(versionIds),
      ])
    },
    stepsByRun: new DataLoader(
      async (ids) => grouped(await steps.listForRuns(db, ids), ids, (s) => s.runId),
      opts,
    ),
    versionsByDefinition: new DataLoader(
      async (ids) => grouped(await versions.listForDefinitions(db, ids), ids, (v) => v.definitionId),
      opts,
    ),
    keyHolders: new DataLoader(
      async (keys) => grouped(await runs.holdersOfKeys(db, keys), keys, (h) => h.requestedKey),
      opts,
    ),
    cueLadder: new DataLoader(
      async (ids) => byId(await cueLadders.getMany(db, ids), ids, (l) => l.stepId),
      opts,
    ),
    logsByRun(limit) {
      let loader = logLoaders.get(limit)
      if (!loader) {
        loader = new DataLoader(
          async (ids) => grouped(await logs.listForRuns(db, ids, limit), ids, (l) => l.runId),
          opts,
        )
        logLoaders.set(limit, loader)
      }
      return loader
    },
  }
}
