/**
 * Helpers shared by the sql/eventSteps/ test files. The step reads and moves are
 * bound through `stepHelpers` to the file's own pool, which exists only once
 * `useTestDb`'s beforeAll has run: hence a getter, not the pool itself.
 */
import { expect } from 'vitest'
import type { Db } from '../../sql/db.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { at, makeRunningRunWithSteps } from './fixtures.ts'

export function nth(list: readonly StepRow[], i: number): StepRow {
  const s = list[i]
  if (!s) throw new Error(`no step ${i}`)
  return s
}

/** `get`, `startedRun` and `begun` on the pool `pool()` answers when called. */
export function stepHelpers(pool: () => Db) {
  const get = async (id: number): Promise<StepRow> => {
    const s = await steps.getById(pool(), id)
    if (!s) throw new Error(`step ${id} not found`)
    return s
  }

  /** A run with `n` pending steps, started (`running`): {@link makeRunningRunWithSteps}. */
  const startedRun = (n: number, overrides: Parameters<typeof makeRunningRunWithSteps>[2] = {}) =>
    makeRunningRunWithSteps(pool(), n, overrides)

  /** Begin a step now with a 30 s lease. */
  async function begun(step: StepRow, owner = 'w1'): Promise<void> {
    expect(await steps.begin(pool(), step.id, owner, at(30_000), new Date())).toBe(true)
  }

  return { get, startedRun, begun }
}
