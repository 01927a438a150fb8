/**
 * One retry per original run, kept by `event_run_retries` (migration 0029)
 * rather than a unique index every run paid for: a second retry of the same
 * original is refused with DUP_ENTRY, also when two are made at once on two
 * connections; the record goes when its original or its retry is deleted, and
 * an original whose retry was deleted may be retried again.
 */
import { expect, it } from 'vitest'
import { DB_ERRNO, isDbErrno } from '../sql/db.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { useTestDb } from './helpers/db.ts'
import { type DefinitionFixture, makeDefinition, makeRun } from './helpers/fixtures.ts'

const t = useTestDb()

async function failedRun(fx: DefinitionFixture): Promise<number> {
  const run = await makeRun(t.db, { definition: fx })
  expect(await runs.transition(t.db, run.id, 'scheduled', 'failed')).toBe(true)
  return run.id
}

/** A new scheduled run made a retry of `originalId` in a transaction of its own. */
async function retried(fx: DefinitionFixture, originalId: number): Promise<number> {
  const run = await makeRun(t.db, { definition: fx })
  await t.db.transaction((tx) => runs.startAsRetry(tx, run.id, originalId, new Date()))
  return run.id
}

/** The retry records of these originals (the file's database is shared by its tests). */
const records = async (...originals: number[]) =>
  (
    await t.db.query<{ original_id: number; run_id: number }>(
      `SELECT original_id, run_id FROM event_run_retries
        WHERE original_id IN (${originals.map(() => '?').join(', ')}) ORDER BY original_id`,
      originals,
    )
  ).map((r) => [Number(r.original_id), Number(r.run_id)])

it('a second retry of an original is refused, and the first is the one found', async () => {
  const fx = await makeDefinition(t.db)
  const original = await failedRun(fx)
  const first = await retried(fx, original)
  const err = await retried(fx, original).catch((e: unknown) => e)
  expect(isDbErrno(err, DB_ERRNO.DUP_ENTRY)).toBe(true)
  expect(await runs.retryOf(t.db, original)).toBe(first)
  expect((await runs.getById(t.db, first))?.retryOf).toBe(original)
  expect(await records(original)).toEqual([[original, first]])
  // Nothing else is guarded: another original takes its own retry.
  const other = await failedRun(fx)
  expect(await runs.retryOf(t.db, other)).toBeNull()
  const second = await retried(fx, other)
  expect(await runs.retryOf(t.db, other)).toBe(second)
})

it('two retries of one original at once on two connections: the second waits for the first and is refused', async () => {
  const fx = await makeDefinition(t.db)
  const original = await failedRun(fx)
  const [a, b] = [await makeRun(t.db, { definition: fx }), await makeRun(t.db, { definition: fx })]
  let letFirstCommit: () => void = () => {}
  const held = new Promise<void>((resolve) => {
    letFirstCommit = resolve
  })
  let firstWritten: () => void = () => {}
  const written = new Promise<void>((resolve) => {
    firstWritten = resolve
  })
  const first = t.db.transaction(async (tx) => {
    await runs.startAsRetry(tx, a?.id as number, original, new Date())
    firstWritten()
    await held
  })
  await written
  let secondDone = false
  const second = t.db
    .transaction((tx) => runs.startAsRetry(tx, b?.id as number, original, new Date()))
    .then(
      () => 'made',
      (e: unknown) => (isDbErrno(e, DB_ERRNO.DUP_ENTRY) ? 'duplicate' : e),
    )
    .finally(() => {
      secondDone = true
    })
  // The second is held at the first's record until that commits.
  await new Promise((r) => setTimeout(r, 300))
  expect(secondDone).toBe(false)
  letFirstCommit()
  await first
  expect(await second).toBe('duplicate')
  expect(await records(original)).toEqual([[original, a?.id]])
  expect((await runs.getById(t.db, b?.id as number))?.status).toBe('scheduled')
})

it('the record goes with its retry, and the original may be retried again; it goes with its original', async () => {
  const fx = await makeDefinition(t.db)
  const kept = await failedRun(fx)
  const retryOfKept = await retried(fx, kept)
  const gone = await failedRun(fx)
  const retryOfGone = await retried(fx, gone)
  expect(await runs.transition(t.db, retryOfKept, 'starting', 'completed')).toBe(true)
  expect(await runs.deleteTerminalRuns(t.db, [{ id: retryOfKept, status: 'completed' }])).toEqual({
    completed: 1,
  })
  expect(await runs.deleteTerminalRuns(t.db, [{ id: gone, status: 'failed' }])).toEqual({ failed: 1 })
  expect(await records(kept, gone)).toEqual([])
  expect(await runs.retryOf(t.db, kept)).toBeNull()
  // The surviving retry still names the run it retried.
  expect((await runs.getById(t.db, retryOfGone))?.retryOf).toBe(gone)
  const again = await retried(fx, kept)
  expect(await runs.retryOf(t.db, kept)).toBe(again)
})

it('a run delete whose guard no longer holds keeps the record', async () => {
  const fx = await makeDefinition(t.db)
  const original = await failedRun(fx)
  const retry = await retried(fx, original)
  // Chosen as terminal, moving by now (the retry is `starting`): nothing of it goes.
  expect(await runs.deleteTerminalRuns(t.db, [{ id: retry, status: 'completed' }])).toEqual({})
  expect(await records(original)).toEqual([[original, retry]])
})
