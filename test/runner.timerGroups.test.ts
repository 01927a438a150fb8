/**
 * timerGroups.ts: which runs of a claim made ahead of their timers wait for
 * them, and in which groups. Pure: no database.
 */
import { describe, expect, it } from 'vitest'
import type { LeasedRun } from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { groupByDue, TIMER_GROUP_MS } from '../src/runner/timerGroups.ts'

const NOW = Date.parse('2026-12-04T20:00:00.000Z')
const run = (id: number) => ({ id }) as LeasedRun
const step = (over: Partial<StepRow>): StepRow =>
  ({
    status: 'running',
    parked: false,
    wakeAt: null,
    claimedBy: null,
    claimExpiresAt: null,
    ...over,
  }) as StepRow
const sleepingUntil = (ms: number) => step({ wakeAt: new Date(NOW + ms) })

describe('groupByDue', () => {
  it("advances now what is due, what has no step read, and what sleeps past the claim's reach", () => {
    const steps = new Map<number, StepRow | null>([
      [1, step({ status: 'pending' })],
      [2, sleepingUntil(-5)],
      [3, sleepingUntil(0)],
      [4, sleepingUntil(500)],
      [5, null],
      [6, step({ parked: true, wakeAt: null })],
    ])
    const { now, later } = groupByDue([1, 2, 3, 4, 5, 6, 7].map(run), steps, NOW, NOW + 60)
    expect(now.map((r) => r.id)).toEqual([1, 2, 3, 4, 5, 6, 7])
    expect(later).toEqual([])
  })

  it('holds timers ending ahead, grouped when they end within the group span, each group at its last end', () => {
    const steps = new Map<number, StepRow | null>([
      [1, sleepingUntil(20 + TIMER_GROUP_MS)],
      [2, sleepingUntil(20)],
      [3, sleepingUntil(20 + TIMER_GROUP_MS)],
      [4, sleepingUntil(20 + TIMER_GROUP_MS + 1)],
      [5, step({ parked: true, wakeAt: new Date(NOW + 50) })],
      [6, sleepingUntil(60)],
    ])
    const { now, later } = groupByDue([1, 2, 3, 4, 5, 6].map(run), steps, NOW, NOW + 60)
    expect(now).toEqual([])
    expect(later.map((g) => ({ at: g.at - NOW, ids: g.runs.map((r) => r.id) }))).toEqual([
      { at: 20 + TIMER_GROUP_MS, ids: [2, 1, 3] },
      { at: 20 + TIMER_GROUP_MS + 1, ids: [4] },
      { at: 60, ids: [5, 6] },
    ])
  })

  it('never advances a held run before its own timer: every group ends at or after each member', () => {
    const offsets = [3, 7, 9, 12, 18, 19, 25, 31, 33, 40, 41, 42, 55]
    const steps = new Map(offsets.map((ms, i) => [i + 1, sleepingUntil(ms)] as const))
    const { later } = groupByDue(
      offsets.map((_, i) => run(i + 1)),
      steps,
      NOW,
      NOW + 60,
    )
    const members = later.flatMap((g) =>
      g.runs.map((r) => ({ at: g.at, own: steps.get(r.id)?.wakeAt?.getTime() ?? 0 })),
    )
    expect(members).toHaveLength(offsets.length)
    for (const m of members) {
      expect(m.at).toBeGreaterThanOrEqual(m.own)
      expect(m.at - m.own).toBeLessThanOrEqual(TIMER_GROUP_MS)
    }
  })
})
