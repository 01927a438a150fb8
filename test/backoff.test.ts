import { describe, expect, it } from 'vitest'
import { retryDelayMs } from '../src/runner/backoff.ts'

describe('retryDelayMs', () => {
  it('doubles from the base and caps at 60 s (equal jitter, at its top)', () => {
    const top = { random: () => 0.999999 }
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => retryDelayMs(n, 1000, top))).toEqual([
      1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000,
    ])
    expect(retryDelayMs(1000, 1000, top)).toBe(60000) // no overflow
  })

  it('equal jitter keeps at least half the delay; full jitter can reach zero', () => {
    expect(retryDelayMs(3, 1000, { random: () => 0 })).toBe(2000)
    expect(retryDelayMs(3, 1000, { random: () => 0.5 })).toBe(3000)
    expect(retryDelayMs(3, 1000, { jitter: 'full', random: () => 0 })).toBe(0)
    expect(retryDelayMs(3, 1000, { jitter: 'full', random: () => 0.5 })).toBe(2000)
  })

  it('stays within bounds with real randomness', () => {
    for (let n = 1; n <= 20; n++) {
      const d = retryDelayMs(n, 1000)
      const full = Math.min(60000, 1000 * 2 ** (n - 1))
      expect(d).toBeGreaterThanOrEqual(full / 2)
      expect(d).toBeLessThanOrEqual(full)
    }
  })

  it('honours a custom cap, a zero base, and a base above the cap', () => {
    expect(retryDelayMs(10, 1000, { capMs: 5000, random: () => 0.999999 })).toBe(5000)
    expect(retryDelayMs(4, 0)).toBe(0)
    expect(retryDelayMs(1, 300_000, { random: () => 0.999999 })).toBe(300_000)
    expect(retryDelayMs(0, 1000, { random: () => 0.999999 })).toBe(1000) // attempt < 1 counts as the first
  })
})
