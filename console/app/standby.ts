/**
 * Stand-by: what a run will ask of a person next, and about when. The next
 * cue step not yet reached, with the time it should come up: the current
 * step's wake time, then each wait before the cue (a `seconds` wait counts
 * from when it starts, an `until` offset from the run's scheduled time).
 * Other steps (logs, webhooks) are taken as instant, so the estimate is the
 * earliest the cue can come up.
 */
import { parseOffset, promptOf } from '../../src/runner/steps/paramText.ts'
import type { RunWithSteps, StepCard } from './operations.ts'

export interface NextCue {
  run: RunWithSteps
  step: StepCard
  prompt: string
  /** Earliest time the cue comes up (ms since epoch); null while the run is paused. */
  eta: number | null
  /** Waits between now and the cue. */
  waits: number
  /** A step before it is waiting on a person now (its cue is in the inbox). */
  blockedByCue: boolean
}

function waitParams(params: unknown): { seconds?: number; until?: string } {
  return params && typeof params === 'object' ? (params as { seconds?: number; until?: string }) : {}
}

/** The run's next cue not yet asked, or null when none is left. */
export function nextCue(run: RunWithSteps, now: number): NextCue | null {
  const steps = [...run.steps].sort((a, b) => a.seq - b.seq)
  const scheduled = Date.parse(run.scheduledFor)
  let t = now
  let waits = 0
  let blockedByCue = false
  for (const step of steps) {
    if (step.status === 'COMPLETED' || step.status === 'SKIPPED' || step.status === 'CANCELLED') continue
    if (step.status === 'FAILED') continue
    if (step.status === 'RUNNING') {
      if (step.parked) blockedByCue = true
      else if (step.wakeAt) {
        const wake = Date.parse(step.wakeAt)
        if (wake > t) t = wake
        if (step.kind === 'core.wait') waits++
      }
      continue
    }
    // PENDING: not reached yet.
    if (step.kind === 'core.cue') {
      return {
        run,
        step,
        prompt: promptOf(step.params),
        eta: run.status === 'PAUSED' ? null : t,
        waits,
        blockedByCue,
      }
    }
    if (step.kind === 'core.wait') {
      waits++
      const p = waitParams(step.params)
      if (typeof p.seconds === 'number') t += p.seconds * 1000
      else if (typeof p.until === 'string') {
        const s = parseOffset(p.until)
        if (s !== null) t = Math.max(t, scheduled + s * 1000)
      }
    }
  }
  return null
}

/** Every run's next cue, soonest first (paused runs last). */
export function standbyList(runs: RunWithSteps[], now: number): NextCue[] {
  const list = runs.map((r) => nextCue(r, now)).filter((c): c is NextCue => c !== null)
  return list.sort((a, b) => (a.eta ?? Number.POSITIVE_INFINITY) - (b.eta ?? Number.POSITIVE_INFINITY))
}
