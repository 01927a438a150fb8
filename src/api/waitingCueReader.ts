/**
 * The inbox poller's reads of the waiting cues, with copies kept between
 * polls: each poll reads which cues wait narrowly (ids, change times,
 * assignees), and in full only the steps and runs it holds no current copy
 * of, which under a show is the cues parked since the last poll and the runs
 * that changed. With 2,000 cues open and a poll several times a second, the
 * full rows of every cue and run, read again each time, were most of a
 * poll's cost to the database, to the driver and to the garbage collector.
 *
 * A copy stands for its row while the row's `updated_at` is the one the copy
 * has and the copy was read once that time was settled (sql/waitingCues.ts,
 * SETTLED_MS); a row changed more recently is read in full on every poll.
 */
import type { Queryable } from '../../sql/db.ts'
import { getByIds as getRunsByIds, type RunListRow } from '../../sql/eventRuns/index.ts'
import { getByIds as getStepsByIds, type StepRow } from '../../sql/eventSteps/index.ts'
import { listWaitingCueKeys, type WaitingCueKey } from '../../sql/waitingCues.ts'

/** A waiting cue: its step, and the names and `team:` names it is for (empty: anyone). */
export interface WaitingCue {
  step: StepRow
  assignees: readonly string[]
}

export interface WaitingCues {
  /** The oldest waiting cues, at most the limit asked for. */
  cues: WaitingCue[]
  /** False when more cues wait beyond the limit. */
  complete: boolean
  /** The runs of {@link cues}, each with its exact count of waiting cues. */
  runs: RunListRow[]
}

export class WaitingCueReader {
  private steps = new Map<number, StepRow>()
  private runs = new Map<number, RunListRow>()
  /** Rows read in full since creation (tests compare them with the cues read). */
  readonly fullReads = { steps: 0, runs: 0 }

  /** The oldest `limit` waiting cues with their runs. */
  async read(db: Queryable, limit: number): Promise<WaitingCues> {
    const { keys, complete } = await listWaitingCueKeys(db, limit)
    const waitingOf = new Map<number, number>()
    for (const k of keys) waitingOf.set(k.runId, (waitingOf.get(k.runId) ?? 0) + 1)

    const staleSteps = keys.filter((k) => !currentCopy(this.steps, k.stepId, k.stepUpdatedAt))
    // Cut at the limit, the keys cannot count a run's cues beyond it: every run is read with its count.
    const staleRuns = complete
      ? uniqueRuns(keys).filter((k) => !currentCopy(this.runs, k.runId, k.runUpdatedAt))
      : uniqueRuns(keys)
    const freshSteps = await getStepsByIds(
      db,
      staleSteps.map((k) => k.stepId),
    )
    const freshRuns = await getRunsByIds(
      db,
      staleRuns.map((k) => k.runId),
      complete ? waitingOf : null,
    )
    this.fullReads.steps += freshSteps.length
    this.fullReads.runs += freshRuns.length

    const steps = new Map<number, StepRow>()
    for (const k of keys) {
      const copy = currentCopy(this.steps, k.stepId, k.stepUpdatedAt)
      if (copy) steps.set(k.stepId, copy)
    }
    for (const s of freshSteps) steps.set(s.id, s)
    const runs = new Map<number, RunListRow>()
    for (const k of keys) {
      const copy = complete ? currentCopy(this.runs, k.runId, k.runUpdatedAt) : undefined
      if (!copy || runs.has(k.runId)) continue
      const count = waitingOf.get(k.runId) ?? 0
      runs.set(k.runId, copy.waitingSteps === count ? copy : { ...copy, waitingSteps: count })
    }
    for (const r of freshRuns) runs.set(r.id, r)

    const cues: WaitingCue[] = []
    const keep = { steps: new Map<number, StepRow>(), runs: new Map<number, RunListRow>() }
    for (const k of keys) {
      const step = steps.get(k.stepId)
      // Answered (or its run deleted) between the two reads: not waiting any more.
      if (!step || !isWaiting(step) || !runs.has(k.runId)) continue
      cues.push({ step, assignees: k.assignees })
      if (k.stepSettled && readAt(step, k.stepUpdatedAt)) keep.steps.set(step.id, step)
      const run = runs.get(k.runId) as RunListRow
      if (k.runSettled && readAt(run, k.runUpdatedAt)) keep.runs.set(run.id, run)
    }
    this.steps = keep.steps
    this.runs = keep.runs
    return { cues, complete, runs: [...runs.values()] }
  }
}

/** The row was read at the change a key names: its `updated_at` is the key's. */
function readAt(row: { updatedAt: Date }, updatedAt: number): boolean {
  return row.updatedAt.getTime() === updatedAt
}

/** The kept copy of row `id`, when it stands for the row as the key names it (else undefined: read it in full). */
function currentCopy<T extends { updatedAt: Date }>(
  copies: ReadonlyMap<number, T>,
  id: number,
  updatedAt: number,
): T | undefined {
  const copy = copies.get(id)
  return copy && readAt(copy, updatedAt) ? copy : undefined
}

function uniqueRuns(keys: readonly WaitingCueKey[]): WaitingCueKey[] {
  const byRun = new Map<number, WaitingCueKey>()
  for (const k of keys) if (!byRun.has(k.runId)) byRun.set(k.runId, k)
  return [...byRun.values()]
}

/** The step waits on a person (what the waiting-steps index holds). */
function isWaiting(step: StepRow): boolean {
  return step.parked && step.status === 'running'
}
