/**
 * A run's program as step rows: each version's program expanded once (and
 * cached), and runs claimed `starting` (keyed and overlap-policy starts) moved
 * to `running` with their step rows, before they are advanced like any other.
 */
import type { Db } from '../../sql/db.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepSpec } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as versions from '../../sql/eventVersions.ts'
import { phaseMove } from './executor/decide.ts'
import { expandProgram, type Program } from './program.ts'
import type { ClaimedRun, EngineDeps } from './types.ts'

/**
 * Programs are immutable per version, so each version is expanded once. Keyed
 * by pool (one process may talk to several databases) and holding the promise,
 * so a cold batch of 1,000 runs of one version asks for it once, not 1,000 times.
 */
const expansionCache = new WeakMap<Db, Map<number, Promise<StepSpec[]>>>()

export function specsForVersion(db: Db, versionId: number): Promise<StepSpec[]> {
  let perDb = expansionCache.get(db)
  if (!perDb) {
    perDb = new Map()
    expansionCache.set(db, perDb)
  }
  const hit = perDb.get(versionId)
  if (hit) return hit
  const pending = (async () => {
    const version = await versions.getById(db, versionId)
    if (!version) throw new Error(`version ${versionId} is missing`)
    return expandProgram(version.program as Program)
  })()
  if (perDb.size > 1000) perDb.clear()
  perDb.set(versionId, pending)
  // A failed lookup (database down) must not be remembered.
  pending.catch(() => perDb?.delete(versionId))
  return pending
}

/** Expand the programs of runs in `starting` (idempotent) and move them to `running`. */
export async function expandStartingRuns(
  deps: EngineDeps,
  claimed: readonly (RunRow | ClaimedRun)[],
): Promise<ClaimedRun[]> {
  if (claimed.length === 0) return []
  const starting = claimed.filter((r) => r.status === 'starting')
  // Leased with their titles (claimTickBatch): advanced as read, no second read.
  if (starting.length === 0 && claimed.every(hasTitles)) return [...claimed]
  if (starting.length === 0)
    return runs.getByIds(
      deps.db,
      claimed.map((r) => r.id),
    )
  const items = await Promise.all(
    starting.map(async (r) => ({ runId: r.id, specs: await specsForVersion(deps.db, r.versionId) })),
  )
  await steps.expand(deps.db, items)
  // Group by first phase so each group is one guarded multi-row transition.
  const byPhase = new Map<string, { phase: string; ending: boolean; ids: number[] }>()
  for (const item of items) {
    // The run enters its first step's phase as it would any other (and `ending` with it).
    const move = phaseMove(item.specs[0] ?? { phase: '', ending: false }, 'running', null)
    const phase = move?.phase ?? ''
    const ending = move?.to === 'ending'
    const key = JSON.stringify([ending, phase])
    const group = byPhase.get(key) ?? { phase, ending, ids: [] }
    group.ids.push(item.runId)
    byPhase.set(key, group)
  }
  for (const { phase, ending, ids } of byPhase.values()) {
    await runs.transitionMany(deps.db, ids, 'starting', 'running', { phase })
    // A program that opens with its ending phase is ending from its first step.
    if (ending) await runs.transitionMany(deps.db, ids, 'running', 'ending', { phase })
  }
  // Re-read (with the definition's title): a cancel may have landed between the
  // claim and the transition, or (after a lease expired) another instance may
  // have moved the run on; the batch path re-reads statuses before each step.
  const fresh = await runs.getByIds(
    deps.db,
    claimed.map((r) => r.id),
  )
  return fresh
}

function hasTitles(run: RunRow | ClaimedRun): run is ClaimedRun {
  return 'definitionTitle' in run && 'definitionSlug' in run
}
