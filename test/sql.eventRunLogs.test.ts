/**
 * sql/eventRunLogs.ts appendMany against a real MariaDB: many steps' identical
 * lines go in set-wise, and every run's lines keep the order they were given
 * in, whatever is grouped with what.
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, makeRunWithSteps } from './helpers/fixtures.ts'

let db: Db
/** One connection, so its session counters count this file's statements only. */
let one: Db
useTestDb({
  ready: (created) => {
    db = created.db
    one = created.open({ connectionLimit: 1 })
  },
})

const insertSelects = async () => {
  const [row] = await one.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Com_insert_select'")
  return Number(row?.Value)
}

it('writes lines many steps share in one statement, each run’s lines in the order given', async () => {
  const fx = await makeDefinition(db)
  const made = []
  for (let i = 0; i < 20; i++)
    made.push(await makeRunWithSteps(db, 2, { definition: fx, scope: `room-${i}` }))
  const stepIds = new Map<number, number[]>()
  for (const { run } of made)
    stepIds.set(
      run.id,
      (await steps.listForRuns(db, [run.id])).sort((a, b) => a.seq - b.seq).map((s) => s.id),
    )
  // Per run, in this order: a line every run's first step writes (shared), one
  // of its own, the shared line again (its first step's second line), and a
  // line of the run itself (no step). Run 0 writes its own first.
  const expected = new Map<number, string[]>()
  const entries: logs.NewLog[] = []
  made.forEach(({ run }, i) => {
    const [first, second] = stepIds.get(run.id) as number[]
    const lines: logs.NewLog[] = [
      { runId: run.id, stepId: first, message: 'doors open', actor: 'runner-a', data: { gate: 2 } },
      { runId: run.id, stepId: second, message: `on stage in room-${i}`, actor: 'runner-a' },
      { runId: run.id, stepId: first, message: 'doors open', actor: 'runner-a', data: { gate: 2 } },
      { runId: run.id, message: 'noted', level: 'warn' },
    ]
    if (i === 0) lines.unshift(lines.splice(1, 1)[0] as logs.NewLog)
    entries.push(...lines)
    expected.set(
      run.id,
      lines.map((l) => l.message),
    )
  })
  const before = { statements: one.stats.statements, insertSelects: await insertSelects() }
  await logs.appendMany(one, entries)
  // Layer by layer: 19 then 20 "doors open" lines went set-wise, the rest as
  // VALUES rows, in five statements for 80 lines.
  expect(await insertSelects()).toBe(before.insertSelects + 2)
  expect(one.stats.statements - before.statements).toBe(5 + 2) // and the two status reads
  for (const { run } of made) {
    const written = (await logs.listForRun(db, run.id, 500)).reverse()
    expect(written.map((l) => l.message)).toEqual(expected.get(run.id))
    const shared = written.filter((l) => l.message === 'doors open')
    expect(shared).toHaveLength(2)
    for (const l of shared)
      expect(l).toMatchObject({
        runId: run.id,
        stepId: stepIds.get(run.id)?.[0],
        level: 'info',
        actor: 'runner-a',
        data: { gate: 2 },
      })
  }
})

it('refuses, rather than writes short, a shared line whose step does not exist', async () => {
  const fx = await makeDefinition(db)
  const runsMade = []
  for (let i = 0; i < 8; i++) runsMade.push((await makeRunWithSteps(db, 1, { definition: fx })).run)
  const entries = runsMade.map((run, i) => ({
    runId: run.id,
    stepId: i === 3 ? 99_999_999 : undefined,
    message: 'x',
  }))
  const real = await steps.listForRuns(
    db,
    runsMade.map((r) => r.id),
  )
  for (const e of entries) e.stepId ??= real.find((s) => s.runId === e.runId)?.id
  await expect(db.transaction((tx) => logs.appendMany(tx, entries))).rejects.toThrow(/wrote 7 of 8 log lines/)
})
