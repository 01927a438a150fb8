/**
 * The cue ladder through the real server with its runner: params checked at
 * publish with paths; reminders, escalations and the deadline applied at their
 * times, each once; answers that cannot race; exclusive cues; `mine`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as cueLadders from '../sql/cueLadders.ts'
import { identitiesOf, personOf } from '../src/api/person.ts'
import { tokenActor } from '../src/auth.ts'
import { countRows, unique } from './helpers/fixtures.ts'
import {
  eventually,
  startTestServer,
  type TestServer,
  TOKENS,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const OPERATOR = tokenActor('operator', TOKENS.operator)
const ADMIN = tokenActor('admin', TOKENS.admin)

const CUE_FIELDS = `id status parked cue { prompt openedAt deadlineAt assignees exclusive escalationLevel remindersSent
  answer { outcome by via at note } }`

interface CueShape {
  id: string
  status: string
  parked: boolean
  cue: {
    prompt: string
    openedAt: string
    deadlineAt: string | null
    assignees: string[]
    exclusive: boolean
    escalationLevel: number
    remindersSent: number
    answer: { outcome: string; by: string; via: string; at: string; note: string | null } | null
  } | null
}

function cueProgram(params: Record<string, unknown>) {
  return { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params }] }] }
}

async function createDefinition(program: unknown): Promise<string> {
  const slug = unique('cue')
  const res = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    { variables: { input: { slug, title: slug, program } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

async function startRun(definitionId: string, scope = unique('scope')): Promise<string> {
  const res = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $scope: String) { startRun(definitionId: $d, scope: $scope) { id } }',
    {
      variables: { d: definitionId, scope },
      auth: 'operator',
    },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.startRun.id as string
}

async function cueOf(runId: string): Promise<CueShape> {
  const res = await s.gql<{ run: { steps: CueShape[] } }>(
    `query ($id: ID!) { run(id: $id) { steps { ${CUE_FIELDS} } } }`,
    {
      variables: { id: runId },
    },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.run.steps[0] as CueShape
}

async function parkedCue(runId: string): Promise<CueShape> {
  return eventually(async () => {
    const step = await cueOf(runId)
    return step.parked && step.cue ? step : null
  })
}

const RESOLVE = `mutation ($id: ID!, $note: String) { resolveCue(stepId: $id, note: $note) { applied step { ${CUE_FIELDS} } } }`

describe('params at publish', () => {
  it('refuses a malformed ladder with a path per problem', async () => {
    const res = await s.gql(
      'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
      {
        variables: {
          input: {
            slug: unique('bad'),
            title: 'bad',
            program: cueProgram({
              prompt: 'Go?',
              assignee: '',
              exclusive: 'yes',
              remindAfterSeconds: [30, 0, 'x'],
              escalate: [{ afterSeconds: 10, to: 'team:leads', extra: 1 }],
              timeoutSeconds: 60,
            }),
          },
        },
      },
    )
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    const text = JSON.stringify(res.body.errors)
    for (const path of [
      'assignee',
      'exclusive',
      'remindAfterSeconds[1]',
      'remindAfterSeconds[2]',
      'escalate[0].extra',
    ])
      expect(text).toContain(path)
    // A rung at or after the deadline would never be sent.
    const late = await s.gql(
      'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
      {
        variables: {
          input: {
            slug: unique('bad'),
            title: 'bad',
            program: cueProgram({
              prompt: 'Go?',
              remindAfterSeconds: [30, 60],
              escalate: [{ afterSeconds: 90, to: 'boss' }],
              timeoutSeconds: 60,
            }),
          },
        },
      },
    )
    const lateText = JSON.stringify(late.body.errors)
    expect(lateText).toContain('remindAfterSeconds[1]: must be before timeoutSeconds')
    expect(lateText).toContain('escalate[0].afterSeconds: must be before timeoutSeconds')
    expect(lateText).not.toContain('remindAfterSeconds[0]')
  })
})

describe('the ladder', () => {
  it('sends each reminder and escalation once at its time, then times out', async () => {
    const def = await createDefinition(
      cueProgram({
        prompt: 'Lights?',
        assignee: 'team:crew',
        remindAfterSeconds: [1],
        escalate: [{ afterSeconds: 2, to: 'team:leads' }],
        timeoutSeconds: 3,
        onTimeout: 'continue',
      }),
    )
    const runId = await startRun(def)
    const opened = await parkedCue(runId)
    expect(opened.cue).toMatchObject({
      prompt: 'Lights?',
      assignees: ['team:crew'],
      remindersSent: 0,
      escalationLevel: 0,
    })
    const openedAt = Date.parse(opened.cue?.openedAt as string)
    expect(Date.parse(opened.cue?.deadlineAt as string) - openedAt).toBe(3000)

    const reminded = await eventually(async () =>
      (await cueOf(runId)).cue?.remindersSent === 1 ? Date.now() : 0,
    )
    expect(reminded - openedAt).toBeGreaterThanOrEqual(1000)
    const escalated = await eventually(async () => {
      const c = await cueOf(runId)
      return c.cue?.escalationLevel === 1 ? c : null
    })
    expect(Date.now() - openedAt).toBeGreaterThanOrEqual(2000)
    expect(escalated.cue?.assignees).toEqual(['team:crew', 'team:leads'])
    const done = await eventually(async () => {
      const c = await cueOf(runId)
      return c.status === 'COMPLETED' ? c : null
    })
    expect(done.cue?.answer).toMatchObject({ outcome: 'timedOut', via: 'timeout' })
    expect(done.cue?.remindersSent).toBe(1)
    const lines = await s.t.db.query<{ message: string }>(
      'SELECT message FROM event_run_logs WHERE run_id = ?',
      [Number(runId)],
    )
    expect(lines.filter((l) => l.message.startsWith('cue reminder'))).toHaveLength(1)
    expect(lines.filter((l) => l.message.startsWith('cue escalated'))).toHaveLength(1)
    // Parked once, re-parked at each rung: "waiting on a person" once, each rung its own line.
    expect(lines.filter((l) => l.message.startsWith('waiting on a person'))).toEqual([
      { message: 'waiting on a person: Lights?' },
    ])
    expect(lines.map((l) => l.message)).toContain('cue reminder 1 of 1 (1s without an answer)')
    expect(lines.map((l) => l.message)).toContain(
      'cue escalated to team:leads (level 1, 2s without an answer)',
    )
  })

  it('a rehearsal at speed walks the ladder in show time', async () => {
    const def = await createDefinition(
      cueProgram({ prompt: 'Fast', remindAfterSeconds: [60], timeoutSeconds: 120, onTimeout: 'continue' }),
    )
    const res = await s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d, rehearsal: true, speed: 60) { id } }',
      { variables: { d: def }, auth: 'operator' },
    )
    expect(res.body.errors).toBeUndefined()
    const runId = res.body.data?.startRun.id as string
    const opened = await parkedCue(runId)
    const openedAt = Date.parse(opened.cue?.openedAt as string)
    // 120 show seconds at x60 are two real seconds.
    expect(Date.parse(opened.cue?.deadlineAt as string) - openedAt).toBe(2000)
    await eventually(async () => (await cueOf(runId)).cue?.remindersSent === 1, 5000)
    expect(Date.now() - openedAt).toBeGreaterThanOrEqual(1000)
    const done = await eventually(async () => {
      const c = await cueOf(runId)
      return c.status === 'COMPLETED' ? c : null
    }, 5000)
    expect(done.cue?.answer?.outcome).toBe('timedOut')
  })

  it('answers: the run log and the audit name the person; a late answer does not apply', async () => {
    const def = await createDefinition(cueProgram({ prompt: 'Doors?' }))
    const runId = await startRun(def)
    const cue = await parkedCue(runId)
    const res = await s.gql<{ resolveCue: { applied: boolean; step: CueShape } }>(RESOLVE, {
      variables: { id: cue.id, note: 'done' },
      auth: 'operator',
    })
    expect(res.body.errors).toBeUndefined()
    expect(res.body.data?.resolveCue.applied).toBe(true)
    expect(res.body.data?.resolveCue.step.cue?.answer).toMatchObject({
      outcome: 'resolved',
      by: OPERATOR,
      via: 'api',
      note: 'done',
    })
    const audit = await s.t.db.query<{ actor: string; outcome: string }>(
      "SELECT actor, outcome FROM audit_log WHERE action = 'cue.resolve' AND target_id = ?",
      [cue.id],
    )
    expect(audit).toEqual([{ actor: OPERATOR, outcome: 'ok' }])
    expect(
      await countRows(s.t.db, 'event_run_logs', 'step_id = ? AND actor = ? AND message LIKE ?', [
        Number(cue.id),
        OPERATOR,
        'resolve cue%',
      ]),
    ).toBe(1)

    const late = await createDefinition(
      cueProgram({ prompt: 'Late?', timeoutSeconds: 1, onTimeout: 'continue' }),
    )
    const lateRun = await startRun(late)
    const lateCue = await parkedCue(lateRun)
    await new Promise((r) => setTimeout(r, 1100))
    const tooLate = await s.gql<{ resolveCue: { applied: boolean } }>(RESOLVE, {
      variables: { id: lateCue.id },
      auth: 'operator',
    })
    expect(tooLate.body.data?.resolveCue.applied).toBe(false)
  })

  it('refuses an outsider on an exclusive cue with FORBIDDEN; an admin may answer', async () => {
    const def = await createDefinition(
      cueProgram({ prompt: 'Mine only', assignee: 'stage-manager', exclusive: true }),
    )
    const runId = await startRun(def)
    const cue = await parkedCue(runId)
    const refused = await s.gql(RESOLVE, { variables: { id: cue.id }, auth: 'operator' })
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const skipRefused = await s.gql('mutation ($id: ID!) { skipStep(stepId: $id) { applied } }', {
      variables: { id: cue.id },
      auth: 'operator',
    })
    expect(skipRefused.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    expect((await cueOf(runId)).parked).toBe(true)
    const admin = await s.gql<{ resolveCue: { applied: boolean } }>(RESOLVE, {
      variables: { id: cue.id },
      auth: 'admin',
    })
    expect(admin.body.data?.resolveCue.applied).toBe(true)
  })

  it('two answers racing, 50 times: exactly one applies and the other names the winner', async () => {
    const def = await createDefinition(cueProgram({ prompt: 'Race' }))
    const runIds = await Promise.all(Array.from({ length: 50 }, () => startRun(def)))
    expect(new Set(runIds).size).toBe(50)
    const cues = await Promise.all(runIds.map((id) => parkedCue(id)))
    for (const cue of cues) {
      const [a, b] = await Promise.all([
        s.gql<{ resolveCue: { applied: boolean; step: CueShape } }>(RESOLVE, {
          variables: { id: cue.id, note: 'a' },
          auth: 'operator',
        }),
        s.gql<{ skipStep: { applied: boolean; step: CueShape } }>(
          `mutation ($id: ID!) { skipStep(stepId: $id, reason: "b") { applied step { ${CUE_FIELDS} } } }`,
          { variables: { id: cue.id }, auth: 'admin' },
        ),
      ])
      expect(a.body.errors).toBeUndefined()
      expect(b.body.errors).toBeUndefined()
      const ra = a.body.data?.resolveCue
      const rb = b.body.data?.skipStep
      expect([ra?.applied, rb?.applied].filter(Boolean)).toHaveLength(1)
      const winner = ra?.applied ? { by: OPERATOR, outcome: 'resolved' } : { by: ADMIN, outcome: 'skipped' }
      const loser = ra?.applied ? rb : ra
      expect(loser?.step.cue?.answer).toMatchObject(winner)
    }
  }, 120_000)
})

describe('mine', () => {
  it('answers the cues assigned to the caller and to nobody, on the query and the subscription', async () => {
    const forOperator = await startRun(
      await createDefinition(cueProgram({ prompt: 'for op', assignee: OPERATOR })),
    )
    const forOther = await startRun(
      await createDefinition(cueProgram({ prompt: 'for other', assignee: 'team:other' })),
    )
    const forAnyone = await startRun(await createDefinition(cueProgram({ prompt: 'for anyone' })))
    const ids = await Promise.all(
      [forOperator, forOther, forAnyone].map(async (r) => (await parkedCue(r)).id),
    )
    const query = 'query ($mine: Boolean) { waitingSteps(mine: $mine, limit: 500) { id } }'
    const mine = await s.gql<{ waitingSteps: { id: string }[] }>(query, {
      variables: { mine: true },
      auth: 'operator',
    })
    const mineIds = mine.body.data?.waitingSteps.map((x) => x.id) ?? []
    expect(mineIds).toContain(ids[0])
    expect(mineIds).toContain(ids[2])
    expect(mineIds).not.toContain(ids[1])
    const all = await s.gql<{ waitingSteps: { id: string }[] }>(query, {
      variables: { mine: false },
      auth: 'operator',
    })
    expect(all.body.data?.waitingSteps.map((x) => x.id)).toEqual(expect.arrayContaining(ids))

    const client = wsClient(s, 'viewer')
    try {
      const sub = wsSubscribe<{ waitingSteps: { id: string }[] }>(
        client,
        'subscription { waitingSteps(mine: true) { id } }',
      )
      const first = await sub.until((e) => Array.isArray(e.data?.waitingSteps))
      const got = first.data?.waitingSteps.map((x) => x.id) ?? []
      // The viewer is nobody's assignee: only the unassigned cue is theirs.
      expect(got).toContain(ids[2])
      expect(got).not.toContain(ids[0])
      expect(got).not.toContain(ids[1])
      sub.stop()
    } finally {
      await client.dispose()
    }
  })

  it('two people in different teams each see the cues of their team, their own, and the unassigned ones', async () => {
    const ops = await startRun(
      await createDefinition(cueProgram({ prompt: 'for ops', assignee: 'team:ops' })),
    )
    const stage = await startRun(
      await createDefinition(cueProgram({ prompt: 'for stage', assignee: 'team:stage' })),
    )
    const alice = await startRun(
      await createDefinition(cueProgram({ prompt: 'for alice', assignee: 'alice' })),
    )
    const anyone = await startRun(await createDefinition(cueProgram({ prompt: 'for anyone' })))
    const [opsCue, stageCue, aliceCue, anyoneCue] = await Promise.all(
      [ops, stage, alice, anyone].map(async (r) => (await parkedCue(r)).id),
    )
    // The people as the auth layer will describe them once principals carry names and teams.
    const seen = async (name: string, teams: string[]) =>
      (
        await cueLadders.listWaiting(
          s.t.db,
          500,
          identitiesOf(personOf({ role: 'operator', actor: name, name, teams })),
        )
      ).map((st) => String(st.id))
    const forAlice = await seen('alice', ['ops'])
    expect(forAlice).toEqual(expect.arrayContaining([opsCue, aliceCue, anyoneCue]))
    expect(forAlice).not.toContain(stageCue)
    const forBob = await seen('bob', ['stage'])
    expect(forBob).toEqual(expect.arrayContaining([stageCue, anyoneCue]))
    expect(forBob).not.toContain(opsCue)
    expect(forBob).not.toContain(aliceCue)
  })
})
