/**
 * The timing behind the live feeds (src/api/pollLoop.ts), and the filter and
 * cursor rules of src/api/runFilter.ts, without a database.
 */
import { describe, expect, it } from 'vitest'
import { PollLoop } from '../src/api/pollLoop.ts'
import { decodeCursor, encodeCursor, matchesFilter, NO_FILTER, parseRunFilter } from '../src/api/runFilter.ts'

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

function loop(intervalMs: number, pollMs = 0, minGapMs?: number) {
  let listening = true
  const starts: number[] = []
  const l = new PollLoop({
    intervalMs,
    minGapMs,
    hasListeners: () => listening,
    poll: async () => {
      starts.push(Date.now())
      if (pollMs) await sleep(pollMs)
    },
  })
  return { l, starts, stopListening: () => (listening = false) }
}

describe('PollLoop', () => {
  it('polls once per interval while someone listens, never when nobody does', async () => {
    const { l, starts, stopListening } = loop(40)
    l.ensure()
    l.ensure() // a second listener schedules nothing more
    await sleep(230)
    expect(starts.length).toBeGreaterThanOrEqual(3)
    expect(starts.length).toBeLessThanOrEqual(6)
    stopListening()
    l.idle()
    const n = starts.length
    await sleep(150)
    expect(starts.length).toBeLessThanOrEqual(n + 1) // one already in flight may finish
    await l.close()
  })

  it('wake polls at once; a burst of wakes costs one poll, or one more after the poll in flight', async () => {
    const { l, starts } = loop(10_000, 150, 5)
    l.ensure()
    const t0 = Date.now()
    for (let i = 0; i < 50; i++) l.wake()
    while (starts.length === 0 && Date.now() - t0 < 2000) await sleep(1)
    // Long before the 10 s interval, and once for the whole burst.
    expect((starts[0] as number) - t0).toBeLessThan(1000)
    expect(starts.length).toBe(1)
    for (let i = 0; i < 50; i++) l.wake() // while that poll is in flight
    await sleep(400)
    expect(starts.length).toBe(2)
    await l.close()
  })

  it('wakes never bring polls closer than the minimum gap', async () => {
    const { l, starts } = loop(10_000, 0, 40)
    l.ensure()
    const deadline = Date.now() + 250
    while (Date.now() < deadline) {
      l.wake()
      await sleep(2)
    }
    for (let i = 1; i < starts.length; i++) {
      expect((starts[i] as number) - (starts[i - 1] as number)).toBeGreaterThanOrEqual(38)
    }
    expect(starts.length).toBeGreaterThanOrEqual(4)
    expect(starts.length).toBeLessThanOrEqual(8)
    await l.close()
  })

  it('a wake that allows time shares one poll with the wakes before it, and an urgent wake does not wait for it', async () => {
    const { l, starts } = loop(10_000, 0, 5)
    l.ensure()
    const t0 = Date.now()
    // Changes that can wait 200 ms, arriving every 10 ms: one poll, about 200 ms after the first.
    for (let i = 0; i < 10; i++) {
      l.wake(200)
      await sleep(10)
    }
    expect(starts.length).toBe(0)
    while (starts.length === 0 && Date.now() - t0 < 2000) await sleep(2)
    expect(starts.length).toBe(1)
    expect((starts[0] as number) - t0).toBeGreaterThanOrEqual(190)
    expect((starts[0] as number) - t0).toBeLessThan(600)
    // An urgent wake while a relaxed one is pending polls now, not at the relaxed time.
    const t1 = Date.now()
    l.wake(10_000)
    l.wake()
    while (starts.length === 1 && Date.now() - t1 < 2000) await sleep(2)
    expect((starts[1] as number) - t1).toBeLessThan(100)
    await sleep(300)
    expect(starts.length).toBe(2) // the urgent poll read after both changes: the relaxed one needs no poll of its own
    await l.close()
  })

  it('a relaxed wake during a poll in flight waits its time after it; an urgent one follows at the gap', async () => {
    const { l, starts } = loop(10_000, 100, 5)
    l.ensure()
    l.wake()
    while (starts.length === 0) await sleep(1)
    const t0 = Date.now()
    l.wake(300) // during the poll in flight (100 ms)
    while (starts.length === 1 && Date.now() - t0 < 2000) await sleep(2)
    expect((starts[1] as number) - t0).toBeGreaterThanOrEqual(290)
    const t1 = Date.now()
    l.wake(5_000)
    l.wake() // urgent, also during the second poll
    while (starts.length === 2 && Date.now() - t1 < 2000) await sleep(2)
    expect((starts[2] as number) - t1).toBeLessThan(250) // the rest of the poll and the gap, not 5 s
    await l.close()
  })

  it('a failing poll is reported and the loop carries on', async () => {
    const errors: unknown[] = []
    let calls = 0
    const l = new PollLoop({
      intervalMs: 20,
      hasListeners: () => true,
      poll: async () => {
        calls++
        throw new Error('database down')
      },
      onError: (err) => errors.push(err),
    })
    l.ensure()
    await sleep(120)
    await l.close()
    expect(calls).toBeGreaterThanOrEqual(3)
    expect(errors.length).toBe(calls)
  })
})

describe('RunFilter and cursors', () => {
  const run = {
    definitionId: 7,
    status: 'running' as const,
    scope: 'hall',
    scheduledFor: new Date('2030-01-01T10:00:00Z'),
    rehearsal: false,
  }

  it('matches every field, with [after, before) for the window', () => {
    expect(matchesFilter(NO_FILTER, run)).toBe(true)
    const f = (input: Parameters<typeof parseRunFilter>[0]) => matchesFilter(parseRunFilter(input), run)
    expect(f({ definitionId: '7' })).toBe(true)
    expect(f({ definitionId: '8' })).toBe(false)
    expect(f({ statuses: ['paused', 'running'] })).toBe(true)
    expect(f({ statuses: [] })).toBe(false)
    expect(f({ scope: 'hall' })).toBe(true)
    expect(f({ scope: '' })).toBe(false)
    expect(f({ rehearsal: false })).toBe(true)
    expect(f({ rehearsal: true })).toBe(false)
    expect(f({ scheduledAfter: run.scheduledFor })).toBe(true)
    expect(f({ scheduledBefore: run.scheduledFor })).toBe(false)
    expect(f({ scheduledBefore: new Date(run.scheduledFor.getTime() + 1) })).toBe(true)
  })

  it('a cursor decodes to the position it encodes; nothing else decodes', () => {
    const key = { scheduledFor: new Date('2030-01-01T10:00:00.123Z'), id: 42 }
    expect(decodeCursor(encodeCursor(key))).toEqual(key)
    for (const bad of ['', 'abc', `${encodeCursor(key)}=`, Buffer.from('r1:1:0').toString('base64url')]) {
      expect(() => decodeCursor(bad)).toThrow(/after must be a pageInfo\.endCursor/)
    }
  })
})
