/**
 * The step executor's rules as pure functions (src/runner/executor/decide.ts):
 * every path that executes steps (per run, in batches, inside the start
 * transaction) takes its guards, phase moves and outcome → state mapping from
 * here, so each rule is pinned once, without a database.
 */
import { describe, expect, it } from 'vitest'
import type { StepRow } from '../sql/eventSteps/index.ts'
import {
  entryOf,
  failureWrite,
  isResume,
  notYet,
  outcomeWrite,
  phaseMove,
  startedAs,
} from '../src/runner/executor/decide.ts'
import { StepFailure } from '../src/runner/steps/types.ts'

const now = new Date('2026-06-01T12:00:00.000Z')
const later = new Date(now.getTime() + 60_000)
const earlier = new Date(now.getTime() - 60_000)

function step(over: Partial<StepRow> = {}): StepRow {
  return {
    id: 1,
    runId: 1,
    seq: 2,
    phaseIndex: 0,
    phase: 'main',
    ending: false,
    kind: 'core.log',
    params: {},
    maxAttempts: 3,
    backoffMs: 1000,
    timeoutMs: 30_000,
    onError: 'fail',
    status: 'pending',
    parked: false,
    attempts: 0,
    wakeAt: null,
    claimedBy: null,
    claimExpiresAt: null,
    startedAt: null,
    endedAt: null,
    lastError: null,
    result: null,
    updatedAt: now,
    ...over,
  }
}

describe('phaseMove', () => {
  it('moves nothing within the phase the run is in', () => {
    expect(phaseMove(step({ phase: 'main' }), 'running', 'main')).toBeNull()
  })
  it('enters ending (status and phase) when a running run reaches its ending phase', () => {
    expect(phaseMove(step({ phase: 'wrap', ending: true }), 'running', 'main')).toEqual({
      to: 'ending',
      phase: 'wrap',
    })
  })
  it('only changes the phase otherwise, an ending run included', () => {
    expect(phaseMove(step({ phase: 'b' }), 'running', 'a')).toEqual({ to: 'phase', phase: 'b' })
    expect(phaseMove(step({ phase: 'wrap2', ending: true }), 'ending', 'wrap')).toEqual({
      to: 'phase',
      phase: 'wrap2',
    })
  })
})

describe('guards before a step is entered', () => {
  it('a parked cue waits for its timeout, or for a person when it has none', () => {
    expect(notYet(step({ status: 'running', parked: true, wakeAt: later }), now)).toEqual({ wakeAt: later })
    expect(notYet(step({ status: 'running', parked: true, wakeAt: null }), now)).toEqual({ wakeAt: null })
    expect(notYet(step({ status: 'running', parked: true, wakeAt: earlier }), now)).toBeNull()
  })
  it('a sleeping step waits until it is due; another owner’s live lease is waited out', () => {
    expect(notYet(step({ wakeAt: later }), now)).toEqual({ wakeAt: later })
    expect(notYet(step({ claimedBy: 'other', claimExpiresAt: later }), now)).toEqual({ wakeAt: later })
    expect(notYet(step({ claimedBy: 'other', claimExpiresAt: earlier }), now)).toBeNull()
  })
  it('a due sleeping or parked step resumes its attempt; a pending one starts a new one', () => {
    expect(isResume(step({ status: 'running', wakeAt: earlier }))).toBe(true)
    expect(isResume(step())).toBe(false)
  })
  it('a step is begun when pending or left executing by a crash, resumed when its timer came due, else not entered', () => {
    expect(entryOf(step())).toBe('begin')
    // A retry whose backoff is over, and an attempt given back at a shutdown.
    expect(entryOf(step({ attempts: 1, lastError: 'x' }))).toBe('begin')
    expect(entryOf(step({ attempts: 1, lastError: 'x', wakeAt: earlier }))).toBe('begin')
    expect(entryOf(step({ attempts: 0, lastError: 'interrupted', wakeAt: earlier }))).toBe('begin')
    // A timer or a cue's timeout that came due, on any attempt.
    expect(entryOf(step({ status: 'running', attempts: 1, wakeAt: earlier }))).toBe('resume')
    expect(entryOf(step({ status: 'running', attempts: 1, parked: true, wakeAt: earlier }))).toBe('resume')
    expect(entryOf(step({ status: 'running', attempts: 2, wakeAt: earlier }))).toBe('resume')
    // Executing after a crash (its lease gone: the begin's guard checks it): begun again.
    expect(entryOf(step({ status: 'running', attempts: 1 }))).toBe('begin')
    // A cue parked on a person with no timeout is not entered (notYet says so first).
    expect(entryOf(step({ status: 'running', attempts: 1, parked: true }))).toBeNull()
  })
})

describe('outcome → state', () => {
  it('maps answers to their writes', () => {
    expect(outcomeWrite({ type: 'completed' })).toEqual({ write: 'complete', result: null })
    expect(outcomeWrite({ type: 'completed', result: { a: 1 } })).toEqual({
      write: 'complete',
      result: { a: 1 },
    })
    expect(outcomeWrite({ type: 'sleep', until: later })).toEqual({ write: 'sleep', until: later })
    expect(outcomeWrite({ type: 'park', until: null })).toEqual({ write: 'park', until: null })
  })
  it('a retryable failure with attempts left retries after the backoff', () => {
    const decided = failureWrite(step({ attempts: 1 }), new Error('boom'), now, false)
    expect(decided.write).toBe('retry')
    if (decided.write !== 'retry') return
    expect(decided.message).toBe('boom')
    // Equal jitter on a 1 s base: between half and all of it.
    expect(decided.wakeAt.getTime() - now.getTime()).toBeGreaterThanOrEqual(500)
    expect(decided.wakeAt.getTime() - now.getTime()).toBeLessThanOrEqual(1000)
  })
  it('out of attempts, or not retryable: failed with the run, or degraded when the step says so', () => {
    expect(failureWrite(step({ attempts: 3 }), new Error('boom'), now, false)).toEqual({
      write: 'fail',
      message: 'boom',
      runError: 'step 2 (core.log) failed after 3 attempt(s): boom',
    })
    const refused = new StepFailure('404', { retryable: false })
    expect(failureWrite(step({ attempts: 1 }), refused, now, false).write).toBe('fail')
    expect(failureWrite(step({ attempts: 1, onError: 'degrade' }), refused, now, false)).toEqual({
      write: 'degrade',
      message: '404',
    })
  })
  it('an attempt cut short by the runner’s shutdown is given back, whatever its count', () => {
    expect(failureWrite(step({ attempts: 3 }), new Error('aborted'), now, true)).toEqual({
      write: 'interrupt',
      message: 'aborted',
    })
  })
  it('keeps error messages short', () => {
    const decided = failureWrite(step({ attempts: 3 }), new Error('x'.repeat(2000)), now, false)
    expect(decided.message).toHaveLength(900)
  })
})

describe('where the start transaction leaves a run', () => {
  const claim = { owner: 'me', token: 't', leaseUntil: later }
  const specs = [
    { phase: 'main', ending: false },
    { phase: 'main', ending: false },
    { phase: 'wrap', ending: true },
  ]
  it('completed when every step ran, in the last step’s phase', () => {
    expect(startedAs(specs, 3, 25, claim, now)).toEqual({ status: 'completed', phase: 'wrap' })
  })
  it('claimed, in the phase of the last step that ran (else the first), ending once in the ending phase', () => {
    expect(startedAs(specs, 0, 25, claim, now)).toMatchObject({
      status: 'running',
      phase: 'main',
      owner: 'me',
    })
    expect(startedAs(specs, 2, 25, claim, now)).toMatchObject({ status: 'running', phase: 'main' })
    expect(startedAs([{ phase: 'wrap', ending: true }, ...specs], 1, 25, claim, now)).toMatchObject({
      status: 'ending',
      phase: 'wrap',
      leaseMs: 60_000,
    })
  })
  it('released due now once the step budget is spent', () => {
    expect(startedAs(specs, 2, 2, claim, now)).toEqual({ status: 'running', phase: 'main', wakeAt: now })
  })
})
