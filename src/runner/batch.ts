/**
 * The batch path: advance many claimed runs together while their next step is
 * an inline kind (`core.log`), in lock-step rounds of a few multi-row
 * statements each, instead of a dozen statements per run. Anything else (a
 * wait, a cue, a webhook, a retry) is handed to the per-run engine.
 *
 * The guards and the phase moves are the per-run path's (executor/decide.ts),
 * applied to many rows and written set-wise (executor/writer.ts): between two
 * steps the statuses of the whole batch are re-read in one query, so a pause
 * or cancel still lands before the next step; steps begin only from `pending`
 * and complete only from `running`; runs finish through the guarded
 * `running | ending → completed` transition.
 */

import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import type { ClaimedRun, EngineDeps } from './engine.ts'
import { stepContext, withTimeout } from './executor/context.ts'
import { isAdvancing, outcomeWrite, phaseMove, takesInlinePath } from './executor/decide.ts'
import { handleFailure } from './executor/failure.ts'
import { BufferedWriter } from './executor/writer.ts'

export interface BatchOutcome {
  /** Runs whose next step needs the per-run engine, with their fresh status and phase. */
  handOff: ClaimedRun[]
  /** Runs this batch is done with: release them (due now if still in flight). */
  release: number[]
  /** Runs to release due at a given time (a failed attempt's retry; null: when a person acts). */
  releaseAt: { id: number; wakeAt: Date | null }[]
}

export async function advanceBatch(deps: EngineDeps, claimed: readonly ClaimedRun[]): Promise<BatchOutcome> {
  const { db, registry } = deps
  const byId = new Map(claimed.map((r) => [r.id, r]))
  const handOff: ClaimedRun[] = []
  const release: number[] = []
  const releaseAt: { id: number; wakeAt: Date | null }[] = []
  let active = claimed.map((r) => r.id)
  const budget = deps.maxStepsPerClaim ?? 25

  const writer = new BufferedWriter(db, deps.hardStop)

  for (let round = 0; round < budget && active.length > 0; round++) {
    if (deps.stopping()) break
    const snapshots = await runs.statusesOf(db, active)
    const live = new Map(snapshots.filter((s) => isAdvancing(s.status)).map((s) => [s.id, s]))
    for (const id of active) if (!live.has(id)) release.push(id)
    if (live.size === 0) {
      active = []
      break
    }
    const next = await steps.nextSteps(db, [...live.keys()])
    const inline: { run: ClaimedRun; step: StepRow }[] = []
    for (const [id, snap] of live) {
      const base = byId.get(id) as ClaimedRun
      const run: ClaimedRun = {
        ...base,
        status: snap.status,
        currentPhase: snap.currentPhase,
        health: snap.health,
      }
      const step = next.get(id)
      if (!step) {
        await writer.finishRun(id)
        release.push(id)
        continue
      }
      if (!takesInlinePath(step, registry.get(step.kind), run.rehearsal)) {
        handOff.push(run)
        continue
      }
      const move = phaseMove(step, snap.status, snap.currentPhase)
      if (move) await writer.movePhase(id, move)
      inline.push({ run, step })
    }
    // Runs finished and phases moved, before any step of the round begins.
    await writer.flush()

    if (inline.length === 0) {
      active = []
      break
    }
    const now = deps.clock.now()
    const leaseUntil = new Date(now.getTime() + deps.leaseMs)
    const begun = await steps.beginMany(
      db,
      inline.map((i) => i.step.id),
      deps.owner,
      leaseUntil,
      now,
    )
    let entries = inline
    if (begun !== inline.length) {
      // A person skipped or cancelled some steps meanwhile: execute only those we began.
      const mine = new Set(
        (
          await steps.getByIds(
            db,
            inline.map((i) => i.step.id),
          )
        )
          .filter((s) => s.status === 'running' && s.claimedBy === deps.owner)
          .map((s) => s.id),
      )
      entries = inline.filter((i) => mine.has(i.step.id))
      for (const i of inline) if (!mine.has(i.step.id)) handOff.push(i.run)
    }
    const succeeded: StepRow[] = []
    const failures: { run: ClaimedRun; step: StepRow; err: unknown }[] = []
    for (const { run, step } of entries) {
      const current: StepRow = { ...step, status: 'running', attempts: step.attempts + 1 }
      // A failed attempt's lines are kept as well: the per-run path writes them as they come.
      try {
        const kind = registry.get(step.kind)
        if (!kind) throw new Error(`unknown step kind "${step.kind}"`)
        // Inline kinds promise to finish at once, but a custom one that does not
        // must not hold the whole batch (and the tick) forever: the step's
        // timeout applies here as on the per-run path.
        const outcome = await withTimeout(step.timeoutMs, deps.hardStop, (signal) =>
          kind.execute(stepContext(deps, writer, run, current, run.definitionTitle, false, signal)),
        )
        const write = outcome ? outcomeWrite(outcome) : undefined
        if (write?.write !== 'complete') throw new Error(`inline kind ${step.kind} did not complete at once`)
        await writer.complete(step.id, write.result)
        succeeded.push(step)
      } catch (err) {
        failures.push({ run, step: current, err })
      }
    }
    // The lines, then the completions (through a database outage: a lost completion would log them again).
    await writer.flush()
    for (const step of succeeded) deps.observer?.stepFinished?.(step.kind, 'completed')
    const failedRuns = new Set<number>()
    for (const f of failures) {
      failedRuns.add(f.run.id)
      const verdict = await handleFailure(deps, f.run, f.step, f.err, f.run.status)
      // In retry backoff: due again when the retry is, not at once (which would
      // cost a claim that finds nothing to do yet).
      if ('wakeAt' in verdict) releaseAt.push({ id: f.run.id, wakeAt: verdict.wakeAt })
      else release.push(f.run.id)
    }
    active = entries.map((e) => e.run.id).filter((id) => !failedRuns.has(id))
  }
  release.push(...active)
  return { handOff, release, releaseAt }
}
