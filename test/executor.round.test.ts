/**
 * One round of a batch's steps (src/runner/executor/round.ts): at most `limit`
 * in flight, inline ones beside them, each outcome told as it settles, and a
 * round that stops waiting for the few far slower than the rest.
 */
import { describe, expect, it } from 'vitest'
import { executeRound } from '../src/runner/executor/round.ts'
import { StepSlots } from '../src/runner/executor/slots.ts'

const resolveAfter = <T>(ms: number, value: T) =>
  new Promise<T>((resolve) => setTimeout(() => resolve(value), ms))

describe('executeRound', () => {
  it('keeps at most `limit` tasks in flight; inline ones take no slot', async () => {
    let inFlight = 0
    let most = 0
    const task = (i: number) => async () => {
      inFlight++
      most = Math.max(most, inFlight)
      await resolveAfter(5, null)
      inFlight--
      return i
    }
    const inline = Array.from({ length: 5 }, (_, i) => ({ unlimited: true, run: async () => 100 + i }))
    const tasks = [...Array.from({ length: 12 }, (_, i) => ({ run: task(i) })), ...inline]
    const { settled, pending } = await executeRound(tasks, 3)
    expect(most).toBe(3)
    expect(pending.size).toBe(0)
    expect(settled.map((s) => (s?.ok ? s.value : 'x'))).toEqual([
      ...Array.from({ length: 12 }, (_, i) => i),
      100,
      101,
      102,
      103,
      104,
    ])
  })

  it('tells each outcome as it settles, errors included, before the round answers', async () => {
    const told: [number, boolean][] = []
    const { settled } = await executeRound(
      [
        { run: () => resolveAfter(20, 'slow') },
        {
          run: async () => {
            throw new Error('boom')
          },
        },
        { run: () => resolveAfter(1, 'fast') },
      ],
      5,
      { onSettled: (i, s) => told.push([i, s.ok]) },
    )
    expect(told).toEqual([
      [1, false],
      [2, true],
      [0, true],
    ])
    expect(settled[1]).toMatchObject({ ok: false })
    expect((settled[1] as { error: Error }).error.message).toBe('boom')
  })

  it('rounds sharing slots hold as many in flight as the slots, by rank then in turn, each whole', async () => {
    const slots = new StepSlots(2)
    let inFlight = 0
    let most = 0
    const began: string[] = []
    const task = (name: string) => async () => {
      began.push(name)
      inFlight++
      most = Math.max(most, inFlight)
      await resolveAfter(5, null)
      inFlight--
      return name
    }
    const round = (prefix: string, rank: number) =>
      executeRound(
        Array.from({ length: 5 }, (_, i) => ({ run: task(`${prefix}${i}`) })),
        // Each round alone would keep 5 in flight; the shared slots keep 2 for all.
        5,
        { slots: slots.lane(rank), minWaitMs: 1 },
      )
    // The later-ranked round asks first and takes the free slots; from then on rank 0 goes first.
    const [third, first, second] = await Promise.all([round('c', 2), round('a', 0), round('b', 1)])
    expect(most).toBe(2)
    expect(began).toEqual([
      'c0',
      'c1',
      'a0',
      'a1',
      'a2',
      'a3',
      'a4',
      'b0',
      'b1',
      'b2',
      'b3',
      'b4',
      'c2',
      'c3',
      'c4',
    ])
    // Waiting for a slot is not straggling: every task settles within its round.
    for (const r of [first, second, third]) {
      expect(r.pending.size).toBe(0)
      expect(r.settled.every((x) => x?.ok)).toBe(true)
    }
    // Every slot is given back: a lone task gets one at once.
    const t0 = Date.now()
    await slots.lane(0).acquire()
    await slots.lane(0).acquire()
    expect(Date.now() - t0).toBeLessThan(50)
  })

  it('lets a straggler go once the rest settled and twice the first half’s time has passed', async () => {
    let release: (v: string) => void = () => {}
    const straggler = new Promise<string>((resolve) => {
      release = resolve
    })
    const told: number[] = []
    const t0 = Date.now()
    const { settled, pending } = await executeRound(
      [...Array.from({ length: 9 }, () => ({ run: () => resolveAfter(10, 'ok') })), { run: () => straggler }],
      10,
      { onSettled: (i) => told.push(i), minWaitMs: 30 },
    )
    const waited = Date.now() - t0
    expect(waited).toBeGreaterThanOrEqual(30)
    expect(waited).toBeLessThan(1000)
    expect(settled.slice(0, 9).every((s) => s?.ok)).toBe(true)
    expect(settled[9]).toBeUndefined()
    expect([...pending.keys()]).toEqual([9])
    // It settles in its own time, through its promise, and is not told as part of the round.
    release('late')
    await expect(pending.get(9)).resolves.toEqual({ ok: true, value: 'late' })
    expect(told).not.toContain(9)
  })

  it('waits for a whole round of steps that are all slow alike', async () => {
    const { settled, pending } = await executeRound(
      Array.from({ length: 6 }, (_, i) => ({ run: () => resolveAfter(60 + i * 5, i) })),
      6,
      { minWaitMs: 10 },
    )
    expect(pending.size).toBe(0)
    expect(settled.every((s) => s?.ok)).toBe(true)
  })

  it('answers at once for no tasks, and a task that throws synchronously fails alone', async () => {
    expect(await executeRound([], 4)).toEqual({ settled: [], pending: new Map() })
    const { settled } = await executeRound(
      [
        {
          run: () => {
            throw new Error('sync')
          },
        },
        { run: async () => 1 },
      ],
      1,
    )
    expect(settled[0]).toMatchObject({ ok: false })
    expect(settled[1]).toEqual({ ok: true, value: 1 })
  })
})
