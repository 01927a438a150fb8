/**
 * Pausing and archiving a definition as operators expect, through the real
 * server with its runner: PAUSED withdraws the schedule's never-started runs
 * at once and no run of the schedule starts after the mutation returns; runs
 * a person scheduled still start; back to ACTIVE the schedule resumes from now
 * with nothing of the pause made up. ARCHIVED withdraws and cancels, and is
 * refused only while a run is in progress, naming how many. Each change's
 * audit row says how many runs it withdrew or cancelled.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as audit from '../sql/auditLog.ts'
import { sleep, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] }
const CUE = { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'go?' } }] }] }

async function create(
  slug: string,
  schedule: string | null,
  program: unknown,
  scopes = [''],
): Promise<string> {
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    { variables: { input: { slug, title: slug, schedule, scopes, program, graceSeconds: 2 } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

function setState(id: string, state: string) {
  return s.gql<{ setDefinitionState: { state: string } }>(
    `mutation ($id: ID!, $state: DefinitionState!) { setDefinitionState(id: $id, state: $state) { state } }`,
    { variables: { id, state } },
  )
}

async function startRunAt(definitionId: string, at: Date): Promise<string> {
  const res = await s.gql<{ startRun: { id: string } }>(
    `mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }`,
    { variables: { d: definitionId, at: at.toISOString() }, auth: 'operator' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.startRun.id as string
}

interface RunFacts {
  id: number
  status: string
  startedBy: string
  scheduledFor: number
  startedAt: number | null
  lastError: string | null
}

async function runsOf(definitionId: string): Promise<RunFacts[]> {
  const rows = await s.t.db.query<Record<string, unknown>>(
    'SELECT id, status, started_by, scheduled_for, started_at, last_error FROM event_runs WHERE definition_id = ? ORDER BY scheduled_for, id',
    [Number(definitionId)],
  )
  return rows.map((r) => ({
    id: Number(r.id),
    status: String(r.status),
    startedBy: String(r.started_by),
    scheduledFor: (r.scheduled_for as Date).getTime(),
    startedAt: r.started_at ? (r.started_at as Date).getTime() : null,
    lastError: (r.last_error as string | null) ?? null,
  }))
}

async function lastAudit(definitionId: string) {
  const [row] = await audit.list(s.t.db, { targetType: 'definition', targetId: definitionId, limit: 1 })
  return row
}

describe('definition states', () => {
  it('PAUSED: nothing of the schedule starts after the mutation returns; person-scheduled runs do; ACTIVE resumes from now', async () => {
    const id = await create('every-second', '* * * * * *', LOG_ONLY)
    // The schedule is running: runs start every second.
    await expect
      .poll(async () => (await runsOf(id)).filter((r) => r.status === 'completed').length, {
        timeout: 10_000,
      })
      .toBeGreaterThan(1)
    const personRun = await startRunAt(id, new Date(Date.now() + 1500))

    const paused = await setState(id, 'PAUSED')
    const pausedAt = Date.now()
    expect(paused.body.data?.setDefinitionState.state).toBe('PAUSED')
    // Withdrawn at once: no never-started run of the schedule is left.
    const after = await runsOf(id)
    expect(after.filter((r) => r.status === 'scheduled' && r.startedBy === 'schedule')).toEqual([])
    const entry = await lastAudit(id)
    expect(entry?.detail).toMatchObject({ from: 'active', state: 'paused', cancelledRuns: 0 })
    expect((entry?.detail as { withdrawnRuns?: number } | undefined)?.withdrawnRuns).toBeGreaterThan(0)

    await sleep(3000)
    const during = await runsOf(id)
    const startedLater = during.filter(
      (r) => r.startedBy === 'schedule' && r.startedAt !== null && r.startedAt >= pausedAt,
    )
    expect(startedLater).toEqual([])
    expect(during.filter((r) => r.scheduledFor > pausedAt && r.startedBy === 'schedule')).toEqual([])
    // The run a person scheduled stays and starts at its time.
    expect(during.find((r) => r.id === Number(personRun))?.status).toBe('completed')

    const resumed = await setState(id, 'ACTIVE')
    const resumedAt = Date.now()
    expect(resumed.body.data?.setDefinitionState.state).toBe('ACTIVE')
    await expect
      .poll(
        async () =>
          (await runsOf(id)).filter((r) => r.scheduledFor > resumedAt && r.status === 'completed').length,
        { timeout: 10_000 },
      )
      .toBeGreaterThan(1)
    // Nothing of the pause was made up.
    const all = await runsOf(id)
    expect(
      all.filter(
        (r) => r.startedBy === 'schedule' && r.scheduledFor > pausedAt && r.scheduledFor <= resumedAt - 1000,
      ),
    ).toEqual([])
  }, 40_000)

  it('ARCHIVED with only scheduled runs: applied, the schedule’s withdrawn and a person’s cancelled, counted in the audit row', async () => {
    const id = await create('daily', '0 0 * * *', LOG_ONLY, ['a', 'b'])
    await expect.poll(async () => (await runsOf(id)).length, { timeout: 10_000 }).toBe(2)
    const personRun = await startRunAt(id, new Date(Date.now() + 3600_000))

    const res = await setState(id, 'ARCHIVED')
    expect(res.body.errors).toBeUndefined()
    expect(res.body.data?.setDefinitionState.state).toBe('ARCHIVED')
    const left = await runsOf(id)
    expect(left).toEqual([
      expect.objectContaining({
        id: Number(personRun),
        status: 'cancelled',
        lastError: 'definition archived',
      }),
    ])
    expect((await lastAudit(id))?.detail).toMatchObject({
      from: 'active',
      state: 'archived',
      withdrawnRuns: 2,
      cancelledRuns: 1,
    })
  })

  it('ARCHIVED while a run is in progress: CONFLICT naming 1 run in progress, nothing withdrawn', async () => {
    const id = await create('cued', null, CUE)
    const run = await s.gql<{ startRun: { id: string } }>(
      `mutation ($d: ID!) { startRun(definitionId: $d) { id } }`,
      { variables: { d: id }, auth: 'operator' },
    )
    const runId = Number(run.body.data?.startRun.id)
    await expect
      .poll(async () => (await runsOf(id)).find((r) => r.id === runId)?.status, { timeout: 10_000 })
      .toBe('running')
    const later = await startRunAt(id, new Date(Date.now() + 3600_000))
    const res = await setState(id, 'ARCHIVED')
    expect(res.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
    expect(res.body.errors?.[0]?.message).toMatch(/has 1 run in progress/)
    expect((await runsOf(id)).find((r) => r.id === Number(later))?.status).toBe('scheduled')
    expect((await lastAudit(id))?.outcome).toBe('refused')
  })
})
