/**
 * A round of cues is parked by one write, and the runner says so once, at that
 * write (`cuesParked`, which the server turns into the live feeds' wake-up):
 * the cues' ladders answer them all in one turn of the event loop, and the
 * round's writer collects that whole turn before it writes. It used to write
 * the first cue alone and the other 49 after it, so most owners waited for a
 * flush more, and the inbox was woken for one cue first.
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  stepsOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const CUES = 50

/** `db` counting the statements that park steps (set them aside). */
function countingParks(db: Db): { db: Db; count: () => number } {
  let n = 0
  const counting: Parameters<typeof wrapStatements>[2] = (real) => (sql, args) => {
    if (/^\s*UPDATE event_run_steps\s+SET parked =/.test(sql)) n++
    return real(sql, args)
  }
  return { db: wrapStatements(wrapStatements(db, 'run', counting), 'runQuery', counting), count: () => n }
}

it(`a round of ${CUES} cues parks in one write, told once`, async () => {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [{ kind: 'core.cue', params: { prompt: 'Lights in {{run.scope}}', assignee: 'op-1' } }],
    ]),
  })
  const ids = await materialiseDueRuns(t.db, def, CUES)
  const counted = countingParks(t.db)
  let told = 0
  const runner = new Runner({
    db: counted.db,
    registry: env.registry,
    clock,
    instanceId: 'cues-parked',
    observer: { cuesParked: () => told++ },
  })
  await runner.tick()
  for (const id of ids)
    expect((await stepsOf(t.db, id))[0]).toMatchObject({ status: 'running', parked: true })
  expect(counted.count()).toBe(1)
  expect(told).toBe(1)
})
