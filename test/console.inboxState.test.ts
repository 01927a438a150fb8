/**
 * The inbox the console keeps from `waitingStepChanges` events (no browser):
 * a reset replaces it, a change puts in, replaces and drops cues by id, and
 * the result is in the server's order (began earlier first, then lower id).
 * A change with nothing to apply it to asks for the whole inbox again.
 */
import { describe, expect, it } from 'vitest'
import { applyInboxChange, byWaitingOrder } from '../console/app/inboxState.ts'
import type { Cue, InboxData } from '../console/app/operations.ts'

/** A cue as the console's fragment reads it; only id, startedAt and params matter here. */
function cue(id: string, startedAt: string, prompt = `cue ${id}`): Cue {
  return {
    id,
    seq: 0,
    phase: 'main',
    kind: 'core.cue',
    params: { prompt },
    startedAt,
    cue: null,
    run: {
      id: `r${id}`,
      scope: '',
      status: 'RUNNING',
      currentPhase: 'main',
      rehearsal: false,
      definition: { id: '1', slug: 's', title: 'Show' },
    },
  } as Cue
}
const ids = (inbox: InboxData | null) => inbox?.waitingSteps.map((c) => c.id)
const T = (s: number) => `2026-12-02T20:00:${String(s).padStart(2, '0')}.000Z`

describe('the console inbox kept from changes', () => {
  it('a reset replaces whatever was held, sorted oldest first', () => {
    const held = { waitingSteps: [cue('1', T(1))] }
    const next = applyInboxChange(held, { reset: true, added: [cue('3', T(3)), cue('2', T(2))], removed: [] })
    expect(ids(next)).toEqual(['2', '3'])
    expect(ids(applyInboxChange(undefined, { reset: true, added: [], removed: [] }))).toEqual([])
  })

  it('adds new cues in their place, drops removed ones and replaces a changed one by id', () => {
    const held = { waitingSteps: [cue('1', T(1)), cue('4', T(4)), cue('6', T(6))] }
    const next = applyInboxChange(held, {
      reset: false,
      added: [cue('5', T(5)), cue('4', T(4), 'rung two sent'), cue('2', T(2))],
      removed: ['1', '99'],
    })
    expect(ids(next)).toEqual(['2', '4', '5', '6'])
    expect(next?.waitingSteps.find((c) => c.id === '4')?.params).toEqual({ prompt: 'rung two sent' })
    expect(held.waitingSteps.map((c) => c.id)).toEqual(['1', '4', '6'])
  })

  it('a change with no inbox held cannot be placed', () => {
    expect(applyInboxChange(undefined, { reset: false, added: [cue('1', T(1))], removed: [] })).toBeNull()
  })

  it('orders cues that began together by id as numbers, past 2^53 too', () => {
    const same = T(7)
    const sorted = [
      cue('10', same),
      cue('9', same),
      cue('90071992547409931', same),
      cue('90071992547409921', same),
    ]
      .sort(byWaitingOrder)
      .map((c) => c.id)
    expect(sorted).toEqual(['9', '10', '90071992547409921', '90071992547409931'])
    expect([cue('2', T(9)), cue('1', T(8))].sort(byWaitingOrder).map((c) => c.id)).toEqual(['1', '2'])
  })
})
