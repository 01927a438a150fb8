/**
 * When a round renews its runs' leases: only when what is left falls short of
 * what its longest step needs (or of half a lease), and then with a third of
 * a lease to spare, so the next round, a moment later, does not renew again.
 */
import { expect, it } from 'vitest'
import { DEFAULT_STEP_NEED_MS, mustRenew, roundLeaseMs, stepNeedMs } from '../src/runner/roundLease.ts'

const LEASE = 30_000

it('a step needs its timeout and five seconds; the default step thirty-five', () => {
  expect(stepNeedMs(1_000)).toBe(6_000)
  expect(DEFAULT_STEP_NEED_MS).toBe(35_000)
})

it('a renewal leaves room for the rounds that follow it', () => {
  const renewedAt = 1_000_000
  const leaseEnds = renewedAt + roundLeaseMs(LEASE, DEFAULT_STEP_NEED_MS)
  expect(mustRenew(renewedAt, leaseEnds, DEFAULT_STEP_NEED_MS, LEASE)).toBe(false)
  // The next round, 100 ms later: no renewal (the old rule renewed to exactly the need, and renewed again here).
  expect(mustRenew(renewedAt + 100, leaseEnds, DEFAULT_STEP_NEED_MS, LEASE)).toBe(false)
  expect(mustRenew(renewedAt + 100, renewedAt + DEFAULT_STEP_NEED_MS, DEFAULT_STEP_NEED_MS, LEASE)).toBe(true)
  // Once the room is spent, or for a step that needs more: renewed.
  expect(mustRenew(renewedAt + LEASE / 3 + 1, leaseEnds, DEFAULT_STEP_NEED_MS, LEASE)).toBe(true)
  expect(mustRenew(renewedAt + 100, leaseEnds, stepNeedMs(120_000), LEASE)).toBe(true)
})

it('a lease is never renewed to less than LEASE_MS, nor less than the step needs', () => {
  expect(roundLeaseMs(LEASE, stepNeedMs(1_000))).toBe(LEASE + 10_000)
  expect(roundLeaseMs(LEASE, stepNeedMs(120_000))).toBe(125_000 + 10_000)
  expect(roundLeaseMs(3_000, DEFAULT_STEP_NEED_MS)).toBe(36_000)
  // Less than half a lease left: renewed whatever the step needs.
  expect(mustRenew(0, LEASE / 2 - 1, 1, LEASE)).toBe(true)
})
