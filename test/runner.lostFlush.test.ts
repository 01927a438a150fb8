/**
 * A flush of step outcomes is sent again while the database cannot be
 * reached. When its COMMIT was kept and only the answer was lost, sending it
 * again wrote its log lines a second time (its guarded moves matched
 * nothing). A flush with lines now writes a receipt in its transaction, and
 * one sent again looks for it first: each line is written once whether the
 * first sending was kept or not. Old receipts go with the retention sweep.
 */
import { describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as receipts from '../sql/flushReceipts.ts'
import { startRun } from '../src/operations/runControls.ts'
import { BufferedWriter } from '../src/runner/executor/writer.ts'
import { Runner } from '../src/runner/runner.ts'
import { connectionLostError, useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  parkedShows,
  program,
  runOf,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

const LINES = /INSERT INTO event_run_logs/

/**
 * The real pool, except that the first one-text transaction writing log
 * lines fails as a lost connection: after its COMMIT was kept (`kept`), or
 * before anything of it was sent.
 */
function losingFirstFlush(db: Db, when: 'kept' | 'notSent'): { db: Db; sendings: () => number } {
  let lost = 0
  let sendings = 0
  const proxy = new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'commitAll')
        return async (...args: Parameters<Db['commitAll']>) => {
          const withLines = args[0].some((st) => LINES.test(st.sql))
          if (withLines) sendings++
          if (withLines && lost === 0) {
            lost++
            if (when === 'kept') await target.commitAll(...args)
            throw connectionLostError()
          }
          return target.commitAll(...args)
        }
      const value = Reflect.get(target, prop, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  return { db: proxy, sendings: () => sendings }
}

describe('a flush sent again', () => {
  for (const when of ['kept', 'notSent'] as const) {
    it(`writes each line once when its first sending was ${when === 'kept' ? 'kept, its answer lost' : 'never sent'}`, async () => {
      const { runIds, cueIds } = await parkedShows(t.db, 2)
      const [a, b] = runIds as [number, number]
      const flaky = losingFirstFlush(t.db, when)
      const writer = new BufferedWriter(flaky.db, new AbortController().signal)
      await writer.complete(cueIds[0] as number, { answered: 'GO' })
      await writer.log({ runId: a, message: `line of ${when}` })
      await writer.log({ runId: b, message: `another of ${when}` })
      await writer.finishRun(b)
      expect(await writer.flush()).toBe(true)
      // Sent twice: the first lost, the second either found the receipt (kept) or sent it all.
      expect(flaky.sendings()).toBe(when === 'kept' ? 1 : 2)
      expect((await logLines(t.db, a)).filter((l) => l === `line of ${when}`)).toHaveLength(1)
      expect((await logLines(t.db, b)).filter((l) => l === `another of ${when}`)).toHaveLength(1)
      expect((await stepsOf(t.db, a))[0]).toMatchObject({ status: 'completed', result: { answered: 'GO' } })
      expect((await runOf(t.db, b)).status).toBe('completed')
    })
  }

  it('a run whose steps log goes on through a lost answer and has each of its lines once', async () => {
    const registry = makeRegistry()
    const clock = new TestClock()
    const env = { db: t.db, registry, clock }
    const def = await defineEvent(env, {
      program: program([
        'main',
        [
          { kind: 'core.log', params: { message: 'doors open' } },
          // A timer: the run is handed on, and its steps after it are the executor's.
          { kind: 'core.wait', params: { seconds: 1 } },
          { kind: 'core.log', params: { message: 'house lights down' } },
          { kind: 'core.log', params: { message: 'curtain' } },
        ],
      ]),
    })
    const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
    const flaky = losingFirstFlush(t.db, 'kept')
    const runner = new Runner({ db: flaky.db, registry, clock, instanceId: 'lost-flush' })
    for (let i = 0; i < 10 && (await runOf(t.db, run.id)).status !== 'completed'; i++) {
      await runner.tick()
      clock.advance(1000)
    }
    expect(flaky.sendings()).toBeGreaterThanOrEqual(1)
    expect((await runOf(t.db, run.id)).status).toBe('completed')
    const lines = await logLines(t.db, run.id)
    for (const message of ['doors open', 'house lights down', 'curtain'])
      expect(
        lines.filter((l) => l === message),
        message,
      ).toHaveLength(1)
  })
})

describe('flush receipts', () => {
  it('are written only by flushes with lines, and the retention sweep deletes the old ones', async () => {
    const count = async () =>
      Number((await t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM flush_receipts'))[0]?.n)
    const { cueIds } = await parkedShows(t.db, 1)
    await t.db.run('DELETE FROM flush_receipts')
    const quiet = new BufferedWriter(t.db, new AbortController().signal)
    quiet.setAsideStep(cueIds[0] as number, new Date(Date.now() + 60_000), false)
    await quiet.flush()
    expect(await count()).toBe(0)

    const old = receipts.newFlushReceipt(new Date(Date.now() - 3600_000))
    const fresh = receipts.newFlushReceipt()
    await t.db.batch([receipts.writeReceiptStatement(old), receipts.writeReceiptStatement(fresh)])
    expect(await receipts.wasKept(t.db, old)).toBe(true)
    // A first tick runs the retention sweep.
    await new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(),
      instanceId: 'sweep',
    }).tick()
    expect(await receipts.wasKept(t.db, old)).toBe(false)
    expect(await receipts.wasKept(t.db, fresh)).toBe(true)
  })
})
