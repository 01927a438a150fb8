/**
 * Every GraphQL document the console sends validates against the schema and
 * fits the server's query budget (depth and cost), so a schema change that
 * breaks the console fails here, not in an operator's browser. Also the
 * stand-by arithmetic, which needs no browser.
 */
import { print } from '@0no-co/graphql.web'
import { type DocumentNode, parse, validate } from 'graphql'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as authoringOps from '../console/app/authoringOps.ts'
import * as ops from '../console/app/operations.ts'
import * as runsOps from '../console/app/runsOps.ts'
import * as showOps from '../console/app/showOps.ts'
import { nextCue, standbyList } from '../console/app/standby.ts'
import { schema } from '../src/api/schema.ts'
import { startTestServer, type TestServer, TOKENS, wsClient, wsSubscribe } from './helpers/server.ts'

/** Each exported document as text (the typed documents are ASTs; the server gets them printed). */
const documents: [string, string][] = Object.entries({
  ...ops,
  ...showOps,
  ...runsOps,
  ...authoringOps,
} as Record<string, unknown>)
  .filter((e): e is [string, DocumentNode] => (e[1] as { kind?: unknown } | null)?.kind === 'Document')
  .map(([name, doc]) => [name, print(doc)] as [string, string])
  .filter(([, text]) => /^\s*(query|mutation|subscription)\b/.test(text))

/** Variables that reach execution (ids that exist nowhere: validation and budget are what is tested). */
const VARIABLES: Record<string, unknown> = {
  id: '999999',
  stepId: '999999',
  definitionId: '999999',
  state: 'PAUSED',
  first: 50,
  after: null,
  at: '2030-01-01T00:00:00.000Z',
  reason: 'test',
  action: 'CANCEL',
  filter: { definitionId: '999999' },
  manifests: [],
  program: {},
  input: { slug: 'never-made', title: 'Never made', program: {} },
}

describe('the console operations', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer()
  })
  afterAll(async () => {
    await s?.close()
  })

  it('viewer answers the role and actor of the token, never the token', async () => {
    for (const role of ['viewer', 'operator', 'admin'] as const) {
      const res = await s.gql<{ viewer: { role: string; actor: string } }>('{ viewer { role actor } }', {
        auth: role,
      })
      expect(res.body.data?.viewer.role).toBe(role.toUpperCase())
      expect(res.body.data?.viewer.actor).toMatch(new RegExp(`^${role}#[0-9a-f]{8}$`))
      expect(JSON.stringify(res.body)).not.toContain(TOKENS[role])
    }
    expect((await s.gql('{ viewer { role } }', { auth: null })).status).toBe(401)
  })

  it('are all found', () => {
    expect(documents.map(([name]) => name)).toEqual(
      expect.arrayContaining([
        'VIEWER',
        'BOARD',
        'IN_PROGRESS_PAGE',
        'INBOX',
        'INBOX_CHANGES',
        'INBOX_MINE_CHANGES',
        'RUN_CHANGES',
        'RUN',
      ]),
    )
  })

  it.each(documents)('%s validates against the schema', (_name, text) => {
    expect(validate(schema, parse(text)).map(String)).toEqual([])
  })

  it('every subscription is accepted over the socket, within the budget', async () => {
    const subscriptions = documents.filter(([, text]) => /^\s*subscription/.test(text))
    expect(subscriptions.length).toBeGreaterThan(0)
    const client = wsClient(s, 'operator')
    try {
      const outcomes = await Promise.all(
        subscriptions.map(async ([name, text]) => {
          const sub = wsSubscribe(client, text, VARIABLES)
          // A refusal (validation, budget, auth) comes back at once; an accepted one stays open.
          const outcome = await Promise.race([
            sub.done.then(
              () => 'completed',
              (err) => JSON.stringify(err),
            ),
            new Promise<string>((r) => setTimeout(() => r('open'), 1500)),
          ])
          sub.stop()
          return [name, outcome]
        }),
      )
      // RUN_STATUS of a run that does not exist ends at once: ended, not refused.
      expect(outcomes.filter(([, outcome]) => outcome !== 'open' && outcome !== 'completed')).toEqual([])
    } finally {
      await client.dispose()
    }
  })

  it.each(documents.filter(([, text]) => !/^\s*subscription/.test(text)))(
    '%s passes the server’s depth and cost limits',
    async (name, text) => {
      const first = name === 'STANDBY' ? ops.STANDBY_PAGE_SIZE : ops.IN_PROGRESS_PAGE_SIZE
      const res = await s.gql(text, { variables: { ...VARIABLES, first } })
      const codes = (res.body.errors ?? []).map((e) => e.extensions?.code)
      expect(codes, JSON.stringify(res.body.errors)).not.toContain('GRAPHQL_VALIDATION_FAILED')
      expect(res.status, JSON.stringify(res.body.errors)).not.toBe(400)
    },
  )
})

describe('stand-by', () => {
  const now = Date.parse('2026-06-01T18:00:00Z')
  const step = (
    seq: number,
    kind: string,
    params: unknown,
    status: ops.StepStatus = 'PENDING',
    extra = {},
  ) => ({
    id: String(seq),
    seq,
    phase: 'main',
    kind,
    params,
    status,
    parked: false,
    attempts: 0,
    maxAttempts: 1,
    wakeAt: null,
    startedAt: null,
    endedAt: null,
    lastError: null,
    cue: null,
    ...extra,
  })
  const run = (steps: ops.RunWithSteps['steps'], status: ops.RunStatus = 'RUNNING'): ops.RunWithSteps => ({
    id: '1',
    scope: '',
    status,
    health: 'OK',
    currentPhase: 'main',
    waitingSteps: 0,
    scheduledFor: '2026-06-01T17:50:00Z',
    startedAt: '2026-06-01T17:50:00Z',
    endedAt: null,
    rehearsal: false,
    lastError: null,
    definition: { id: '1', slug: 's', title: 'Show' },
    steps,
  })

  it('adds the current wake time and every wait before the next cue', () => {
    const r = run([
      step(0, 'core.log', {}, 'COMPLETED'),
      step(1, 'core.wait', { seconds: 60 }, 'RUNNING', { wakeAt: '2026-06-01T18:00:30Z' }),
      step(2, 'core.wait', { seconds: 90 }),
      step(3, 'core.log', {}),
      step(4, 'core.cue', { prompt: 'Go?' }),
      step(5, 'core.cue', { prompt: 'Later?' }),
    ])
    const c = nextCue(r, now)
    expect(c?.prompt).toBe('Go?')
    expect(c?.eta).toBe(now + 30_000 + 90_000)
    expect(c?.waits).toBe(2)
  })

  it('counts an until offset from the scheduled time, never earlier than now', () => {
    const r = run([step(0, 'core.wait', { until: '+20m' }), step(1, 'core.cue', { prompt: 'Go?' })])
    expect(nextCue(r, now)?.eta).toBe(Date.parse('2026-06-01T18:10:00Z'))
    const past = run([step(0, 'core.wait', { until: '+5m' }), step(1, 'core.cue', { prompt: 'Go?' })])
    expect(nextCue(past, now)?.eta).toBe(now)
  })

  it('says when a cue waits now ahead of it, when the run is paused, and when no cue is left', () => {
    const blocked = run([
      step(0, 'core.cue', { prompt: 'Now?' }, 'RUNNING', { parked: true }),
      step(1, 'core.cue', { prompt: 'Next?' }),
    ])
    expect(nextCue(blocked, now)).toMatchObject({ prompt: 'Next?', blockedByCue: true })
    const paused = run([step(0, 'core.cue', { prompt: 'Go?' })], 'PAUSED')
    expect(nextCue(paused, now)?.eta).toBeNull()
    expect(nextCue(run([step(0, 'core.log', {})]), now)).toBeNull()
    expect(
      standbyList([paused, run([step(0, 'core.cue', { prompt: 'Go?' })])], now).map((c) => c.run.status),
    ).toEqual(['RUNNING', 'PAUSED'])
  })
})
