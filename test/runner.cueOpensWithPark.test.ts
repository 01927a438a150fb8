/**
 * A new cue's ladder opens with its park, in one transaction: until the park
 * is written there is no ladder row, no CUE_WAITING and nothing to answer;
 * once it is, all three are there. Before, the ladder opened a round trip
 * ahead of the park, so a cue's people were told (and could answer) before
 * it waited, and a round's cues took two round trips to park. The park's
 * write is held back for real, on the runner's own pool, before it is sent.
 */
import { afterAll, expect, it } from 'vitest'
import * as channels from '../sql/notifications/channels.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { DbCueLadder } from '../src/runner/cueLadder.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { countRows, makeRun } from './helpers/fixtures.ts'
import { cueShow, parkedCueOf, sleep, stepsOf, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterAll(async () => {
  await runner?.stop()
})

const PARK_HELD_MS = 500

it('a cue is told, and can be answered, only once its park is written', async () => {
  await channels.create(t.db, {
    name: 'cues',
    kind: 'WEBHOOK',
    target: 'http://127.0.0.1:9/hook',
    events: ['CUE_WAITING'],
    definitionIds: null,
    teams: null,
    lateStartSeconds: 60,
    signingSecret: null,
    enabled: true,
  })
  let parkHeldAt = 0
  let released = false
  // The first park's transaction waits here before it is sent.
  const db = wrapStatements(t.db, 'runQuery', (real) => async (sql, params) => {
    if (parkHeldAt === 0 && /SET parked = /.test(sql)) {
      parkHeldAt = Date.now()
      await sleep(PARK_HELD_MS)
      released = true
    }
    return real(sql, params)
  })
  runner = new Runner({
    db,
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 60_000,
    settings: { webhookAllow: [], cueLadder: new DbCueLadder(t.db) },
  })
  const runId = (await makeRun(t.db, { definition: await cueShow(t.db), scheduledFor: new Date() })).id
  runner.start()
  await waitFor(() => parkHeldAt > 0 || null, { timeoutMs: 10_000 })

  const cue = (await stepsOf(t.db, runId)).find((st) => st.kind === 'core.cue')
  expect(cue).toMatchObject({ status: 'running', parked: false })
  const cueId = cue?.id as number
  const ladderRows = () => countRows(t.db, 'cue_ladders', 'step_id = ?', [cueId])
  const told = () => countRows(t.db, 'notification_events', "type = 'CUE_WAITING' AND step_id = ?", [cueId])
  // The park is being written: nobody is told yet, and an answer finds nothing waiting.
  expect(await ladderRows()).toBe(0)
  expect(await told()).toBe(0)
  const early = await resolveCueAs(
    { db: t.db, clock: systemClock },
    cueId,
    { name: 'operator', teams: [], admin: false },
    'go',
    'api',
  )
  expect(early.applied).toBe(false)
  expect(released).toBe(false)

  // Written together.
  await waitFor(() => parkedCueOf(t.db, runId), { timeoutMs: 10_000 })
  expect(await ladderRows()).toBe(1)
  expect(await told()).toBe(1)
  const answered = await resolveCueAs(
    { db: t.db, clock: systemClock, nudge: () => runner?.nudge() },
    cueId,
    { name: 'operator', teams: [], admin: false },
    'go',
    'api',
  )
  expect(answered.applied).toBe(true)
})
