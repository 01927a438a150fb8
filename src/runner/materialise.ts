/**
 * Materialisation: turn each active definition's schedule into `scheduled` runs
 * for the look-ahead horizon, one per occurrence per scope.
 *
 * It is cheap to repeat: the definition's watermark says how far runs already
 * exist, so a pass with nothing new costs one SELECT; and the unique key makes
 * writing an occurrence twice a no-op rather than a duplicate, so two instances
 * materialising at once is harmless.
 */
import type { Db } from '../../sql/db.ts'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { NewRun } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import { occurrencesBetween } from './schedule.ts'
import { renderTemplate } from './template.ts'

/** After downtime, occurrences older than this are not back-filled (they would all be `missed`). */
const MAX_CATCH_UP_MS = 7 * 24 * 3600 * 1000
/** A bound on one definition's occurrences per pass (a `* * * * * *` schedule over a day is 86,400). */
const MAX_OCCURRENCES_PER_PASS = 20_000

/** The concurrency key of one run: the definition's template rendered for that run. */
export function resolveConcurrencyKey(
  template: string | null,
  run: { scope: string; scheduledFor: Date; params: Record<string, unknown> | null },
  def: { title: string; slug: string },
): string | null {
  if (!template) return null
  const key = String(
    renderTemplate(template, {
      run: { id: '', scope: run.scope, scheduledFor: run.scheduledFor.toISOString() },
      params: run.params,
      definition: def,
    }),
  ).slice(0, 255)
  return key === '' ? null : key
}

/** The runs one definition's schedule asks for in `(from, to]`. */
export function occurrenceRuns(def: DefinitionRow, from: Date, to: Date): NewRun[] {
  if (!def.schedule || def.currentVersionId === null) return []
  const instants = occurrencesBetween(def.schedule, def.timezone, from, to, MAX_OCCURRENCES_PER_PASS)
  const scopes = def.scopes.length > 0 ? def.scopes : ['']
  return instants.flatMap((scheduledFor) =>
    scopes.map((scope) => ({
      definitionId: def.id,
      versionId: def.currentVersionId as number,
      scope,
      scheduledFor,
      timezone: def.timezone,
      concurrencyKey: resolveConcurrencyKey(def.concurrencyKey, { scope, scheduledFor, params: null }, def),
      params: null,
      rehearsal: false,
      startedBy: 'schedule',
    })),
  )
}

/** Materialise one definition up to `now + horizonMs`; answers how many runs were new. */
export async function materialiseDefinition(
  db: Db,
  def: DefinitionRow,
  now: Date,
  horizonMs: number,
): Promise<number> {
  const to = new Date(now.getTime() + horizonMs)
  const floor = new Date(now.getTime() - MAX_CATCH_UP_MS)
  // First pass (or after a schedule change): from now. Later passes: from the
  // watermark, so occurrences that fell in a downtime appear (and become missed).
  let from = def.materializedThrough ?? now
  if (from < floor) from = floor
  if (to <= from) return 0
  const rows = occurrenceRuns(def, from, to)
  // One short transaction that first writes the definition's guard: an archive
  // racing this pass either waits (or, on another cluster node, loses at COMMIT)
  // and then sees these runs, or wins first and this pass writes nothing. Safe
  // to repeat: a second pass inserts only what the first did not commit.
  return db.transaction(
    async (tx) => {
      if ((await definitions.lockForNewRuns(tx, def.id)) !== 'active') return 0
      let created = 0
      for (let i = 0; i < rows.length; i += 1000) {
        created += await runs.materialiseMany(tx, rows.slice(i, i + 1000))
      }
      await definitions.setWatermark(tx, def.id, to)
      return created
    },
    { retryable: true },
  )
}

/**
 * One materialisation pass over every active scheduled definition. A definition
 * whose schedule fails to evaluate is reported through `onError` and skipped, so
 * one bad row cannot stop the others.
 */
export async function materialiseAll(
  db: Db,
  now: Date,
  horizonMs: number,
  onError: (def: DefinitionRow, err: unknown) => void,
): Promise<number> {
  const defs = await definitions.listMaterialisable(db)
  let created = 0
  for (const def of defs) {
    if (def.materializedThrough && def.materializedThrough.getTime() >= now.getTime() + horizonMs - 1000)
      continue
    try {
      created += await materialiseDefinition(db, def, now, horizonMs)
    } catch (err) {
      onError(def, err)
    }
  }
  return created
}
