/**
 * A claim made ahead of timers' ends (wakeLane.ts) holds runs whose steps
 * are not due yet. Advanced now, their round would find each step not yet
 * due and put it back to sleep; so they wait, claimed, and each group is
 * advanced once the last of its timers has ended.
 *
 * Why groups and not one batch: a claim can take timers that end tens of
 * milliseconds apart, and one batch launched at the last of them would make
 * the first late by all of that. Why not one batch per timer: every batch
 * has rounds of its own (statuses, begins, outcomes, give-backs), and under
 * load timers end every few milliseconds.
 */
import type { LeasedRun } from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import { notYet } from './executor/decide.ts'

/** Timers ending within this of a group's first are advanced together, at the group's last. */
export const TIMER_GROUP_MS = 10

/** Runs to advance once the runner's clock reads `at` (ms), or later. */
export interface TimerGroup {
  at: number
  runs: LeasedRun[]
}

/**
 * Split claimed runs into those to advance now and groups to advance when
 * their timers end. A run waits only for a step that sleeps (or is parked
 * with a timeout) until a time after `now` and no later than `dueBy`, both on
 * the runner's clock; any other run (its next step unknown, due, or due
 * after `dueBy`) is advanced now and its round decides, as for any claim.
 */
export function groupByDue(
  claimed: readonly LeasedRun[],
  nextSteps: ReadonlyMap<number, StepRow | null>,
  now: number,
  dueBy: number,
): { now: LeasedRun[]; later: TimerGroup[] } {
  const dueNow: LeasedRun[] = []
  const waiting: { at: number; run: LeasedRun }[] = []
  const nowDate = new Date(now)
  for (const run of claimed) {
    const step = nextSteps.get(run.id)
    const at = step ? notYet(step, nowDate)?.wakeAt?.getTime() : undefined
    if (at === undefined || at <= now || at > dueBy) dueNow.push(run)
    else waiting.push({ at, run })
  }
  waiting.sort((a, b) => a.at - b.at)
  const later: TimerGroup[] = []
  let group: TimerGroup | null = null
  let first = 0
  for (const { at, run } of waiting) {
    if (!group || at - first > TIMER_GROUP_MS) {
      group = { at, runs: [] }
      first = at
      later.push(group)
    }
    group.runs.push(run)
    group.at = at
  }
  return { now: dueNow, later }
}
