/** Run controls record who did what, including the requests that changed nothing. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as logsSql from '../sql/eventRunLogs.ts'
import { createDefinition } from '../src/operations/definitions.ts'
import { cancelRun, pauseRun, startRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'

let t: TestDb
let definitionId: number
beforeAll(async () => {
  t = await createTestDb()
  const def = await createDefinition(
    { db: t.db, registry: createDefaultRegistry(), clock: systemClock },
    {
      slug: 'controls',
      title: 'Controls',
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'go' } }] }] },
    },
    'admin#test',
  )
  definitionId = def.id
})
afterAll(async () => {
  await t.drop()
})

describe('run controls', () => {
  it('startRun with `at` is idempotent and logs the repeated request with its actor', async () => {
    const deps = { db: t.db, clock: systemClock }
    const at = new Date('2031-05-01T18:00:00.000Z')
    const first = await startRun(deps, { definitionId, scope: 'hall', at, actor: 'operator#aaaa' })
    const second = await startRun(deps, { definitionId, scope: 'hall', at, actor: 'operator#bbbb' })
    expect(second.id).toBe(first.id)
    const log = await logsSql.listForRun(t.db, first.id)
    expect(log.map((l) => [l.actor, l.message])).toEqual([
      ['operator#bbbb', 'run requested again by operator#bbbb: it already exists'],
      ['operator#aaaa', expect.stringContaining('run requested by operator#aaaa')],
    ])
    // A rehearsal at the same instant is its own run and never carries the key.
    const rehearsal = await startRun(deps, {
      definitionId,
      scope: 'hall',
      at,
      rehearsal: true,
      actor: 'operator#aaaa',
    })
    expect(rehearsal.id).not.toBe(first.id)
    expect(rehearsal.rehearsal).toBe(true)
  })

  it('a refused control is recorded with its actor and outcome', async () => {
    const deps = { db: t.db, clock: systemClock }
    const run = await startRun(deps, { definitionId, actor: 'operator#aaaa' })
    const paused = await pauseRun(deps, run.id, 'operator#cccc')
    expect(paused.applied).toBe(false) // still SCHEDULED: only RUNNING or ENDING can pause
    const cancelled = await cancelRun(deps, run.id, 'operator#cccc', 'weather')
    expect(cancelled.applied).toBe(true)
    expect(cancelled.run.status).toBe('cancelled')
    const log = await logsSql.listForRun(t.db, run.id)
    expect(log[0]).toMatchObject({
      actor: 'operator#cccc',
      message: 'cancel by operator#cccc',
      data: { applied: true, reason: 'weather' },
    })
    expect(log[1]).toMatchObject({
      actor: 'operator#cccc',
      level: 'warn',
      message: 'pause by operator#cccc not applied: the run is SCHEDULED',
    })
  })
})
