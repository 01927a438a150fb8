import { describe, expect, it } from 'vitest'
import { MAX_TICK_BACKOFF_MS, retryDelayMs, tickBackoffMs } from '../src/runner/backoff.ts'

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

describe('tickBackoffMs', () => {
  it('doubles the tick per failed tick in a row, up to the cap', () => {
    expect([1, 2, 3, 4].map((n) => tickBackoffMs(250, n))).toEqual([500, 1000, 2000, 4000])
    expect(tickBackoffMs(250, 5)).toBe(MAX_TICK_BACKOFF_MS)
    // 2 ** 2000 is Infinity: a long streak stays at the cap.
    expect(tickBackoffMs(250, 2000)).toBe(MAX_TICK_BACKOFF_MS)
  })

  it('never waits less than a tick longer than the cap', () => {
    expect(tickBackoffMs(10_000, 1)).toBe(10_000)
    expect(tickBackoffMs(10_000, 9)).toBe(10_000)
  })
})
