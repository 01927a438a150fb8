/**
 * The batch path: advance many claimed runs together while their next step is
 * an inline kind (`core.log`), in lock-step rounds of a few multi-row
 * statements each, instead of a dozen statements per run. Anything else (a
 * wait, a cue, a webhook, a retry) is handed to the per-run engine.
 *
 * The guards are the same ones the per-run path uses, applied to many rows:
 * between two steps the statuses of the whole batch are re-read in one query, so
 * a pause or cancel still lands before the next step; steps begin only from
 * `pending` and complete only from `running`; runs finish through the guarded
 * `running | ending → completed` transition.
 */

import type { NewLog } from '../../sql/eventRunLogs.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import {
  type ClaimedRun,
  type EngineDeps,
  handleFailure,
  recordOutcome,
  stepContext,
  withTimeout,
} from './engine.ts'

export interface BatchOutcome {
  /** Runs whose next step needs the per-run engine, with their fresh status and phase. */
  handOff: ClaimedRun[]
  /** Runs this batch is done with: release them (due now if still in flight). */
  release: number[]
  /** Runs to release due at a given time (a failed attempt's retry; null: when a person acts). */
  releaseAt: { id: number; wakeAt: Date | null }[]
}

function group<K>(pairs: [K, number][]): Map<K, number[]> {
  const out = new Map<K, number[]>()
  for (const [k, id] of pairs) out.set(k, [...(out.get(k) ?? []), id])
  return out
}

export async function advanceBatch(deps: EngineDeps, claimed: readonly ClaimedRun[]): Promise<BatchOutcome> {
  const { db, registry } = deps
  const byId = new Map(claimed.map((r) => [r.id, r]))
  const handOff: ClaimedRun[] = []
  const release: number[] = []
  const releaseAt: { id: number; wakeAt: Date | null }[] = []
  let active = claimed.map((r) => r.id)
  const budget = deps.maxStepsPerClaim ?? 25

  for (let round = 0; round < budget && active.length > 0; round++) {
    if (deps.stopping()) break
    const snapshots = await runs.statusesOf(db, active)
    const live = new Map(
      snapshots.filter((s) => s.status === 'running' || s.status === 'ending').map((s) => [s.id, s]),
    )
    for (const id of active) if (!live.has(id)) release.push(id)
    if (live.size === 0) {
      active = []
      break
    }
    const next = await steps.nextSteps(db, [...live.keys()])
    const finished: number[] = []
    const inline: { run: ClaimedRun; step: StepRow }[] = []
    const phaseMoves: [string, number][] = []
    const endingMoves: [string, number][] = []
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
        finished.push(id)
        continue
      }
      const kind = registry.get(step.kind)
      const fresh = step.status === 'pending' && step.attempts === 0 && !step.wakeAt && !step.claimExpiresAt
      // A rehearsal must not execute a kind with side effects; the per-run engine
      // logs its intent instead, so such a step never takes the inline path.
      const rehearsed = run.rehearsal && kind?.sideEffects === true
      if (!kind?.inline || !fresh || rehearsed) {
        handOff.push(run)
        continue
      }
      if (step.phase !== snap.currentPhase) {
        if (step.ending && snap.status === 'running') endingMoves.push([step.phase, id])
        else phaseMoves.push([step.phase, id])
      }
      inline.push({ run, step })
    }

    if (finished.length > 0) {
      // Guarded: where a cancel won the race, the run stays cancelled.
      await runs.transitionMany(db, finished, ['running', 'ending'], 'completed')
      release.push(...finished)
    }
    for (const [phase, ids] of group(endingMoves))
      await runs.transitionMany(db, ids, 'running', 'ending', { phase })
    for (const [phase, ids] of group(phaseMoves)) await runs.setPhaseMany(db, ids, phase)

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
    const lines: NewLog[] = []
    const succeeded: number[] = []
    // Inline kinds log rather than answer; one that answers gets its own UPDATE.
    const answered: { id: number; result: unknown }[] = []
    const failures: { run: ClaimedRun; step: StepRow; err: unknown }[] = []
    for (const { run, step } of entries) {
      const current: StepRow = { ...step, status: 'running', attempts: step.attempts + 1 }
      const ctx = stepContext(deps, run, current, run.definitionTitle, false, deps.hardStop)
      ctx.log = async (level, message, data) => {
        lines.push({ runId: run.id, stepId: step.id, level, message, data, actor: deps.owner })
      }
      try {
        const kind = registry.get(step.kind)
        if (!kind) throw new Error(`unknown step kind "${step.kind}"`)
        // Inline kinds promise to finish at once, but a custom one that does not
        // must not hold the whole batch (and the tick) forever: the step's
        // timeout applies here as on the per-run path.
        const outcome = await withTimeout(step.timeoutMs, deps.hardStop, (signal) =>
          kind.execute({ ...ctx, signal }),
        )
        if (outcome?.type !== 'completed')
          throw new Error(`inline kind ${step.kind} did not complete at once`)
        if (outcome.result === undefined || outcome.result === null) succeeded.push(step.id)
        else answered.push({ id: step.id, result: outcome.result })
      } catch (err) {
        failures.push({ run, step: current, err })
      }
    }
    await logs.appendMany(db, lines)
    // The lines are written: from here on, a lost completion would log them again.
    await recordOutcome(deps.hardStop, async () => {
      await steps.completeMany(db, succeeded)
      for (const { id, result } of answered) await steps.complete(db, id, result)
    })
    succeeded.push(...answered.map((a) => a.id))
    const kindOf = new Map(entries.map((e) => [e.step.id, e.step.kind]))
    for (const id of succeeded) deps.observer?.stepFinished?.(kindOf.get(id) ?? 'unknown', 'completed')
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
