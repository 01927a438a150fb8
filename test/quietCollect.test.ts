/**
 * After a busy spell the instance gives its garbage back once it is quiet, at
 * a moment the runner has nothing due, and an idle instance never collects.
 * Real V8 collections on this process's heap (no database involved): the
 * garbage is a few hundred MB of objects promoted to the old generation, then
 * dropped, as a show's deliveries and rows are.
 */
import { getHeapStatistics } from 'node:v8'
import { describe, expect, it } from 'vitest'
import {
  type Collected,
  collectAgain,
  MAX_COLLECTIONS_PER_SPELL,
  startQuietCollect,
} from '../src/quietCollect.ts'

const MB = 2 ** 20
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * About `mb` MB of objects that survive long enough to be old, then nothing
 * refers to them; with `keepEvery`, every so many of them stay referred to
 * (answered), scattered over the pages the rest leave empty.
 */
async function makeOldGarbage(mb: number, keepEvery = 0): Promise<unknown[]> {
  let keep: unknown[] | null = []
  for (let i = 0; i < mb * 5000; i++) keep.push({ i, s: `row ${i}`, o: { a: [i, i + 1] } })
  const survivors = keepEvery > 0 ? keep.filter((_, i) => i % keepEvery === 0) : []
  // Two scavenges' worth of allocation later they are in the old generation.
  for (let k = 0; k < 4; k++) {
    let churn: unknown[] | null = Array.from({ length: 200_000 }, (_, i) => ({ i }))
    churn = null
    void churn
    await sleep(5)
  }
  keep = null
  void keep
  return survivors
}

/** A collector checking every 100 ms while the runner sleeps on `asleepForMs`, and what it collected. */
function collecting(asleepForMs: () => number): { collected: Collected[]; q: { stop(): void } } {
  const collected: Collected[] = []
  const q = startQuietCollect({ asleepForMs, everyMs: 100, onCollected: (c) => collected.push(c) })
  return { collected, q }
}

describe('the quiet collection after a busy spell', () => {
  it('collects a grown heap once the loop is quiet and the runner sleeps on', async () => {
    const { collected, q } = collecting(() => 1000)
    try {
      await makeOldGarbage(150)
      const grown = getHeapStatistics().used_heap_size
      for (let i = 0; i < 40 && collected.length === 0; i++) await sleep(100)
      expect(collected).toHaveLength(1)
      const c = collected[0] as (typeof collected)[number]
      console.log(
        `[quietCollect] ${Math.round(grown / MB)} MB used → ${Math.round(c.usedAfter / MB)} MB after one collection of ${c.pauseMs.toFixed(0)} ms`,
      )
      expect(c.usedBefore - c.usedAfter).toBeGreaterThan(100 * MB)
      // Once collected, the next checks find nothing grown: one collection per spell.
      await sleep(500)
      expect(collected).toHaveLength(1)
    } finally {
      q.stop()
    }
  })

  it('collects once more when the first leaves sparse pages held, and the heap V8 holds comes down', async () => {
    const { collected, q } = collecting(() => 1000)
    try {
      // A spell's survivors scattered over its pages: one object in fifty outlives it.
      const survivors = await makeOldGarbage(150, 50)
      for (let i = 0; i < 60 && collected.length < 2; i++) await sleep(100)
      const [first, second] = collected
      expect(first?.again).toBe(true)
      expect(second?.again).toBe(false)
      const f = first as Collected
      const c = second as Collected
      console.log(
        `[quietCollect] sparse: after one collection ${Math.round(f.usedAfter / MB)} MB used of ${Math.round(f.heldAfter / MB)} held; after the second ${Math.round(c.heldAfter / MB)} held`,
      )
      // The first left most of the spell's pages held; the second gave them back.
      expect(f.heldAfter - f.usedAfter).toBeGreaterThan(64 * MB)
      expect(f.heldAfter - c.heldAfter).toBeGreaterThan(64 * MB)
      // And then it stops: the pages came back, nothing more to compact.
      await sleep(500)
      expect(collected).toHaveLength(2)
      expect(collected.length).toBeLessThanOrEqual(MAX_COLLECTIONS_PER_SPELL)
      // Still referred to here, so they lived through both collections.
      expect(survivors).toHaveLength((150 * 5000) / 50)
    } finally {
      q.stop()
    }
  })

  it('waits while the runner is about to pass (a start may be due)', async () => {
    let asleep = 100
    const { collected, q } = collecting(() => asleep)
    try {
      await makeOldGarbage(150)
      await sleep(700)
      expect(collected).toHaveLength(0)
      asleep = 1000
      for (let i = 0; i < 40 && collected.length === 0; i++) await sleep(100)
      expect(collected).toHaveLength(1)
    } finally {
      q.stop()
    }
  })

  it("collects start-up's garbage at start, so a spell is measured from the live heap", async () => {
    await makeOldGarbage(150)
    const before = getHeapStatistics().used_heap_size
    const q = startQuietCollect({ asleepForMs: () => null, everyMs: 60_000, collectAtStart: true })
    try {
      // Had the floor been taken over that garbage, a later spell's would read as 150 MB less grown.
      expect(before - getHeapStatistics().used_heap_size).toBeGreaterThan(100 * MB)
    } finally {
      q.stop()
    }
  })

  it('leaves an idle instance alone', async () => {
    let collections = 0
    const q = startQuietCollect({ asleepForMs: () => null, everyMs: 50, collect: () => collections++ })
    try {
      await sleep(1000)
      expect(collections).toBe(0)
    } finally {
      q.stop()
    }
  })
})

describe('whether a spell collects again (the rule, on given heap sizes)', () => {
  const growth = 64 * MB
  const heap = (held: number, used: number) => ({ total_heap_size: held * MB, used_heap_size: used * MB })

  it('after the first collection: again while the held heap is growth above the used, whatever it gave back', () => {
    expect(collectAgain(1, heap(300, 250), heap(280, 70), growth)).toBe(true)
    expect(collectAgain(1, heap(300, 250), heap(130, 70), growth)).toBe(false)
  })

  it('after the second and third: again only while each gives back at least half of growth', () => {
    // Compacted 280 → 240 (40 MB back, more than 32): a third collection follows.
    expect(collectAgain(2, heap(280, 70), heap(240, 70), growth)).toBe(true)
    // The third gave back 20 MB: no fourth, though the pages are still sparse.
    expect(collectAgain(3, heap(240, 70), heap(220, 70), growth)).toBe(false)
    expect(collectAgain(3, heap(240, 70), heap(190, 70), growth)).toBe(true)
  })

  it(`never more than ${MAX_COLLECTIONS_PER_SPELL} in a spell`, () => {
    expect(collectAgain(MAX_COLLECTIONS_PER_SPELL, heap(400, 70), heap(300, 70), growth)).toBe(false)
    expect(collectAgain(MAX_COLLECTIONS_PER_SPELL - 1, heap(400, 70), heap(300, 70), growth)).toBe(true)
  })
})
