/**
 * sql/eventSteps/ against a real MariaDB: how a run's steps come to exist
 * (idempotent expansion, the start transaction's insertStarted) and which of
 * them runs next (the lowest unfinished seq, not the lowest id).
 */
import { beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { useTestDb } from './helpers/db.ts'
import { nth, stepHelpers } from './helpers/eventSteps.ts'
import { countRows, makeRun, resetRuns, stepSpecs } from './helpers/fixtures.ts'

let db: Db
useTestDb({ ready: (created) => (db = created.db) })
beforeEach(async () => {
  // Every test starts from empty run tables.
  await resetRuns(db)
})

const { get, startedRun, begun } = stepHelpers(() => db)

describe('expand', () => {
  it('is idempotent: a second expansion inserts nothing; an extended one inserts only the new seqs', async () => {
    const run = await makeRun(db)
    const specs = stepSpecs(5, {
      kind: 'core.webhook',
      params: { url: 'https://x.test/' },
      maxAttempts: 3,
      onError: 'degrade',
    })
    expect(await steps.expand(db, [{ runId: run.id, specs }])).toBe(5)
    expect(await steps.expand(db, [{ runId: run.id, specs }])).toBe(0)
    expect(await countRows(db, 'event_run_steps', 'run_id = ?', [run.id])).toBe(5)
    expect(await steps.expand(db, [{ runId: run.id, specs: stepSpecs(7) }])).toBe(2)
    expect(await steps.expand(db, [])).toBe(0)
    expect(await steps.expand(db, [{ runId: run.id, specs: [] }])).toBe(0)
    const list = await steps.listForRun(db, run.id)
    expect(list.map((s) => s.seq)).toEqual([0, 1, 2, 3, 4, 5, 6])
    // The first expansion's rows were not overwritten by the second.
    expect(nth(list, 0)).toMatchObject({
      kind: 'core.webhook',
      params: { url: 'https://x.test/' },
      maxAttempts: 3,
      onError: 'degrade',
      status: 'pending',
      parked: false,
      attempts: 0,
      wakeAt: null,
      claimedBy: null,
    })
  })

  it('expands several runs in one call, idempotently', async () => {
    const a = await makeRun(db)
    const b = await makeRun(db)
    const items = [
      { runId: a.id, specs: stepSpecs(3) },
      { runId: b.id, specs: stepSpecs(2) },
    ]
    expect(await steps.expand(db, items)).toBe(5)
    expect(await steps.expand(db, items)).toBe(0)
    const all = await steps.listForRuns(db, [a.id, b.id])
    expect(all.map((s) => [s.runId, s.seq])).toEqual([
      [a.id, 0],
      [a.id, 1],
      [a.id, 2],
      [b.id, 0],
      [b.id, 1],
    ])
  })
})

describe('insertStarted (the start transaction)', () => {
  it.each([
    ['from the INSERT’s first id', false],
    ['read back', true],
  ])('inserts steps in their final state and answers their ids in input order (%s)', async (_, readBack) => {
    const a = await makeRun(db)
    const b = await makeRun(db)
    const at = new Date(Date.now() - 1000)
    const [s0, s1, s2] = stepSpecs(3)
    const rows = [
      { runId: a.id, spec: s0!, done: true },
      { runId: a.id, spec: s1!, done: true },
      { runId: a.id, spec: s2!, done: false },
      { runId: b.id, spec: s0!, done: false },
    ]
    // More rows than one statement carries, so ids span several INSERTs.
    const many = await makeRun(db)
    const bulk = stepSpecs(2500).map((spec) => ({ runId: many.id, spec, done: true }))
    // Steps many runs share (the same spec objects, as runs of one version do)
    // go in set-wise, interleaved here with the rows above.
    const sharing = await Promise.all(Array.from({ length: 12 }, () => makeRun(db)))
    const shared = sharing.flatMap((r, i) => [
      { runId: r.id, spec: s0!, done: true },
      { runId: r.id, spec: s1!, done: i % 3 === 0 },
    ])
    rows.splice(2, 0, ...shared.slice(0, 10))
    rows.push(...shared.slice(10))
    const ids = await db.transaction((tx) => steps.insertStarted(tx, [...rows, ...bulk], at, { readBack }))
    expect(ids).toHaveLength(rows.length + bulk.length)
    expect(new Set(ids).size).toBe(ids.length)
    const byId = new Map(
      (await steps.listForRuns(db, [a.id, b.id, many.id, ...sharing.map((r) => r.id)])).map((st) => [
        st.id,
        st,
      ]),
    )
    ;[...rows, ...bulk].forEach((row, i) => {
      const st = byId.get(ids[i] as number)
      expect(st).toMatchObject({ runId: row.runId, seq: row.spec.seq })
      expect(st).toMatchObject(
        row.done
          ? { status: 'completed', attempts: 1, startedAt: at, endedAt: at }
          : { status: 'pending', attempts: 0, startedAt: null, endedAt: null },
      )
    })
  })

  it('inserts a lone step in one statement, its id the INSERT’s own, under any id lock mode', async () => {
    // Ids handed out before it, so a wrong answer (a guessed id) would show.
    await makeRun(db)
    const run = await makeRun(db)
    const [spec] = stepSpecs(1)
    const before = db.stats.statements
    const [id] = await db.transaction((tx) =>
      steps.insertStarted(tx, [{ runId: run.id, spec: spec!, done: true }], new Date()),
    )
    // BEGIN, the INSERT and COMMIT: no read of the server's id settings.
    expect(db.stats.statements - before).toBe(3)
    expect(await get(id as number)).toMatchObject({ runId: run.id, seq: spec!.seq, status: 'completed' })
  })

  it('refuses a second expansion of a run: the start transaction never expands twice', async () => {
    const run = await makeRun(db)
    const [spec] = stepSpecs(1)
    const row = { runId: run.id, spec: spec!, done: false }
    await db.transaction((tx) => steps.insertStarted(tx, [row], new Date()))
    await expect(db.transaction((tx) => steps.insertStarted(tx, [row], new Date()))).rejects.toThrow(
      /DUP_ENTRY/,
    )
  })
})

describe('nextStep / nextSteps', () => {
  it('pick the lowest unfinished seq (not the lowest id); null/absent when all are done', async () => {
    const a = await makeRun(db)
    await db.run("UPDATE event_runs SET status = 'running' WHERE id = ?", [a.id])
    // Inserted in reverse, so id order and seq order disagree.
    await steps.expand(db, [{ runId: a.id, specs: stepSpecs(4).reverse() }])
    const aSteps = await steps.listForRun(db, a.id)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(0)
    await begun(nth(aSteps, 0))
    await steps.complete(db, nth(aSteps, 0).id, null)
    await steps.skip(db, nth(aSteps, 1).id, null)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(2)
    await begun(nth(aSteps, 2))
    await steps.park(db, nth(aSteps, 2).id, null)
    expect((await steps.nextStep(db, a.id))?.seq).toBe(2) // parked is unfinished

    const { run: b, steps: bSteps } = await startedRun(2)
    for (const s of bSteps) await steps.skip(db, s.id, null)
    const { run: c } = await startedRun(3)
    const none = await makeRun(db)
    expect(await steps.nextStep(db, b.id)).toBeNull()
    expect(await steps.nextStep(db, none.id)).toBeNull()

    const map = await steps.nextSteps(db, [a.id, b.id, c.id, none.id])
    expect([...map.keys()].sort((x, y) => x - y)).toEqual([a.id, c.id].sort((x, y) => x - y))
    expect(map.get(a.id)?.seq).toBe(2)
    expect(map.get(a.id)?.id).toBe(nth(aSteps, 2).id)
    expect(map.get(c.id)?.seq).toBe(0)
    expect((await steps.nextSteps(db, [])).size).toBe(0)
  })
})
