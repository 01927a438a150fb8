/**
 * Stand-by: what a run will ask of a person next, and about when. The next
 * cue step not yet reached, with the time it should come up: the current
 * step's wake time, then each wait before the cue (a `seconds` wait counts
 * from when it starts, an `until` offset from the run's scheduled time).
 * Other steps (logs, webhooks) are taken as instant, so the estimate is the
 * earliest the cue can come up.
 */
import { parseOffset, promptOf } from '../../src/runner/steps/paramText.ts'
import type { RunCard, RunWithSteps, ScheduledRun, StepCard } from './operations.ts'

export interface NextCue {
  run: RunCard
  /** The cue step (runs in progress; a run waiting to start has no steps yet). */
  step?: StepCard
  phase: string
  prompt: string
  /** Earliest time the cue comes up (ms since epoch); null while the run is paused. */
  eta: number | null
  /** Waits between now and the cue. */
  waits: number
  /** A step before it is waiting on a person now (its cue is in the inbox). */
  blockedByCue: boolean
  /** This cue waits on a person now (it is in the inbox): its deadline, if one is set. */
  waitingNow?: { deadlineAt: string | null }
  /** The run has not started: a person scheduled it (who), for its scheduled time. */
  scheduledBy?: string | null
}

function waitParams(params: unknown): { seconds?: number; until?: string } {
  return params && typeof params === 'object' ? (params as { seconds?: number; until?: string }) : {}
}

/** When a `core.wait` not yet begun at `t` ends: `seconds` after it, or at `until` after the scheduled time. */
function afterWait(t: number, params: unknown, scheduled: number): number {
  const p = waitParams(params)
  if (typeof p.seconds === 'number') return t + p.seconds * 1000
  if (typeof p.until === 'string') {
    const s = parseOffset(p.until)
    if (s !== null) return Math.max(t, scheduled + s * 1000)
  }
  return t
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
        phase: step.phase,
        prompt: promptOf(step.params),
        eta: run.status === 'PAUSED' ? null : t,
        waits,
        blockedByCue,
      }
    }
    if (step.kind === 'core.wait') {
      waits++
      t = afterWait(t, step.params, scheduled)
    }
  }
  return null
}

/** The cues waiting on a person now in a run (they are what it asks first). */
function waitingNowOf(run: RunWithSteps, now: number): NextCue[] {
  return run.steps
    .filter((st) => st.status === 'RUNNING' && st.parked && st.kind === 'core.cue')
    .sort((a, b) => a.seq - b.seq)
    .map((st) => ({
      run,
      step: st,
      phase: st.phase,
      prompt: promptOf(st.params),
      eta: now,
      waits: 0,
      blockedByCue: false,
      waitingNow: { deadlineAt: st.cue?.deadlineAt ?? null },
    }))
}

interface ProgramStep {
  kind?: unknown
  params?: unknown
}

/**
 * The first cue of a run waiting to start, from the program it will run: at
 * its scheduled time (or now, when that has passed) plus the waits before it.
 */
export function scheduledFirstCue(run: ScheduledRun, now: number): NextCue | null {
  const program = run.version.program as { phases?: { name?: unknown; steps?: ProgramStep[] }[] } | null
  const scheduled = Date.parse(run.scheduledFor)
  let t = Math.max(now, scheduled)
  let waits = 0
  for (const phase of program?.phases ?? []) {
    for (const step of phase.steps ?? []) {
      if (step.kind === 'core.cue')
        return {
          run,
          phase: typeof phase.name === 'string' ? phase.name : '',
          prompt: promptOf(step.params),
          eta: t,
          waits,
          blockedByCue: false,
          scheduledBy: run.startedBy,
        }
      if (step.kind === 'core.wait') {
        waits++
        t = afterWait(t, step.params, scheduled)
      }
    }
  }
  return null
}

/** A run waiting to start that a person scheduled (the schedule's own occurrences are listed as such). */
export function scheduledByPerson(run: { startedBy: string | null }): boolean {
  return run.startedBy !== 'schedule'
}

/**
 * Every run's next cue, soonest first (paused runs last), after the cues that
 * wait on a person now (oldest first): a cue going live stays listed, as
 * waiting now, instead of leaving stand-by blank. Runs waiting to start that a
 * person scheduled come with their first cue.
 */
export function standbyList(runs: RunWithSteps[], now: number, scheduled: ScheduledRun[] = []): NextCue[] {
  const waiting = runs.flatMap((r) => waitingNowOf(r, now))
  waiting.sort((a, b) => Date.parse(a.step?.startedAt ?? '') - Date.parse(b.step?.startedAt ?? ''))
  const ahead = [
    ...runs.map((r) => nextCue(r, now)),
    ...scheduled.filter(scheduledByPerson).map((r) => scheduledFirstCue(r, now)),
  ].filter((c): c is NextCue => c !== null)
  ahead.sort((a, b) => (a.eta ?? Number.POSITIVE_INFINITY) - (b.eta ?? Number.POSITIVE_INFINITY))
  return [...waiting, ...ahead]
}
