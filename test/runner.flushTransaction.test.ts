/**
 * The executor's writes of a round go as one transaction in one round trip
 * (its BEGIN and COMMIT in the text): runs finished, phases, log lines, the
 * steps' outcomes and the runs' health are kept or lost together. They used
 * to be one autocommit statement after another, a round trip each, and a
 * parked cue waited for all of them before its owner's inbox was told.
 */
import { expect, it } from 'vitest'
import type { LogLevel } from '../sql/eventRunLogs.ts'
import { BufferedWriter } from '../src/runner/executor/writer.ts'
import { useTestDb } from './helpers/db.ts'
import { logLines, parkedShows, runOf, stepsOf } from './helpers/runnerHarness.ts'

const t = useTestDb()

it('a flush of every kind of write is one round trip, and what it wrote is all there', async () => {
  const { runIds, cueIds } = await parkedShows(t.db, 4)
  const [a, b, c, d] = runIds as [number, number, number, number]
  const [cueA, cueB, cueC] = cueIds as [number, number, number, number]
  const writer = new BufferedWriter(t.db, new AbortController().signal)
  await writer.finishRun(d)
  await writer.movePhase(a, { phase: 'encore', to: 'phase' })
  await writer.log({ runId: a, message: 'one line' })
  await writer.log({ runId: b, message: 'another' })
  await writer.complete(cueA, { answered: 'GO' })
  writer.setAsideStep(cueB, new Date(Date.now() + 60_000), false)
  writer.failAttempt(cueC, 'it broke', null)
  const before = { ...t.db.stats }
  await writer.flush()
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(1)
  expect(writer.isEmpty()).toBe(true)
  expect((await runOf(t.db, d)).status).toBe('completed')
  expect((await runOf(t.db, a)).currentPhase).toBe('encore')
  expect(await logLines(t.db, a)).toContain('one line')
  expect(await logLines(t.db, b)).toContain('another')
  expect((await stepsOf(t.db, a))[0]).toMatchObject({ status: 'completed', result: { answered: 'GO' } })
  expect((await stepsOf(t.db, b))[0]).toMatchObject({ status: 'running', parked: false })
  expect((await stepsOf(t.db, c))[0]).toMatchObject({ status: 'failed', lastError: 'it broke' })
  // The failed step's run is degraded in the same transaction.
  expect((await runOf(t.db, c)).health).toBe('degraded')
  // Nothing collected: nothing sent.
  const idle = { ...t.db.stats }
  await writer.flush()
  expect(t.db.stats.roundTrips).toBe(idle.roundTrips)
})

it('a write of a flush that fails keeps none of the others: the run stays unfinished, the cue parked', async () => {
  const { runIds, cueIds } = await parkedShows(t.db, 2)
  const [a, b] = runIds as [number, number]
  const writer = new BufferedWriter(t.db, new AbortController().signal)
  await writer.finishRun(a)
  await writer.complete(cueIds[1] as number, null)
  // A level longer than its column: the server refuses the line (strict mode), after the run's move in the same text.
  await writer.log({ runId: b, message: 'refused', level: 'much-too-long-a-level' as LogLevel })
  await expect(writer.flush()).rejects.toMatchObject({ name: 'DatabaseError' })
  expect((await runOf(t.db, a)).status).toBe('running')
  expect((await stepsOf(t.db, b))[0]).toMatchObject({ status: 'running', parked: true })
  expect(await logLines(t.db, b)).not.toContain('refused')
})
