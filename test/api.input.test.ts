/**
 * Bad input on every argument that takes text or numbers: the right code, a
 * message a person can act on, and nothing leaked (no SQL, no stack frames).
 * Plus DATABASE_UNAVAILABLE from a server whose database is gone.
 */
import { createServer } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { buildApp } from '../src/server.ts'
import {
  type Auth,
  type GqlResponse,
  leakProblems,
  SESSION_PROGRAM,
  SHOWRUNNER_TOKENS,
  sseSubscribe,
  startTestServer,
  type TestServer,
  TOKENS,
} from './helpers/server.ts'

let s: TestServer
let defId: string
let runId: string
/** Any step id: lengths are checked before the step is looked up. */
const cueStepId = '1'

const HOSTILE = [
  "1' OR '1'='1",
  '1; DROP TABLE event_runs; --',
  '0x10',
  '-1',
  '1.5',
  '1e3',
  '',
  ' ',
  '１２',
  '99999999999999999999999',
  'x'.repeat(10_000),
  '\u0000',
  '<script>alert(1)</script>',
]

beforeAll(async () => {
  s = await startTestServer()
  const created = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!) { createDefinition(input: { slug: "inputs", title: "Inputs", schedule: "0 18 * * 5", timezone: "Europe/London", program: $p }) { id } }',
    { variables: { p: SESSION_PROGRAM } },
  )
  defId = created.body.data?.createDefinition.id as string
  const started = await s.gql<{ startRun: { id: string; steps: { id: string; kind: string }[] } }>(
    `mutation { startRun(definitionId: "${defId}") { id steps { id kind } } }`,
  )
  runId = started.body.data?.startRun.id as string
  expect(runId).toMatch(/^\d+$/)
})
afterAll(async () => {
  await s?.close()
})

function expectError(r: GqlResponse, code: string, message?: RegExp): void {
  const e = r.body.errors?.[0]
  expect(e, JSON.stringify(r.body)).toBeDefined()
  expect(e?.extensions?.code, JSON.stringify(r.body)).toBe(code)
  if (message) expect(e?.message).toMatch(message)
  expect(e?.message.length).toBeLessThan(1000)
  expect(leakProblems(r.body)).toEqual([])
}

async function gql<T = Record<string, unknown>>(
  query: string,
  variables?: Record<string, unknown>,
  auth: Auth = 'admin',
) {
  return s.gql<T>(query, { variables, auth })
}

describe('IDs', () => {
  const ID_FIELDS: [string, string][] = [
    ['run', 'query ($id: ID!) { run(id: $id) { id } }'],
    ['runs(definitionId)', 'query ($id: ID) { runs(definitionId: $id) { id } }'],
    ['definition(id)', 'query ($id: ID) { definition(id: $id) { id } }'],
    ['startRun', 'mutation ($id: ID!) { startRun(definitionId: $id) { id } }'],
    ['pauseRun', 'mutation ($id: ID!) { pauseRun(id: $id) { applied } }'],
    ['resumeRun', 'mutation ($id: ID!) { resumeRun(id: $id) { applied } }'],
    ['cancelRun', 'mutation ($id: ID!) { cancelRun(id: $id) { applied } }'],
    ['resolveCue', 'mutation ($id: ID!) { resolveCue(stepId: $id) { applied } }'],
    ['skipStep', 'mutation ($id: ID!) { skipStep(stepId: $id) { applied } }'],
    ['updateDefinition', 'mutation ($id: ID!) { updateDefinition(id: $id, input: { title: "t" }) { id } }'],
    ['publishVersion', 'mutation ($id: ID!) { publishVersion(definitionId: $id, program: {}) { id } }'],
    ['setDefinitionState', 'mutation ($id: ID!) { setDefinitionState(id: $id, state: PAUSED) { id } }'],
  ]

  it.each(ID_FIELDS)('%s: a non-numeric id is BAD_USER_INPUT naming the argument', async (_name, doc) => {
    for (const bad of HOSTILE) {
      const r = await gql(doc, { id: bad })
      expectError(r, 'BAD_USER_INPUT', /must be a numeric id such as "42"/)
      expect(r.body.errors?.[0]?.message.length).toBeLessThan(200)
    }
  })

  it('unknown numeric ids: null from run/definition, NOT_FOUND from mutations', async () => {
    expect((await gql('{ run(id: "424242") { id } }')).body).toEqual({ data: { run: null } })
    expect((await gql('{ definition(id: "424242") { id } }')).body).toEqual({ data: { definition: null } })
    for (const [, doc] of ID_FIELDS.filter(([n]) => !n.startsWith('run') && !n.startsWith('definition('))) {
      expectError(await gql(doc, { id: '424242' }), 'NOT_FOUND', /424242/)
    }
  })

  it('runStatus: a bad id is BAD_USER_INPUT, an unknown one NOT_FOUND', async () => {
    for (const [id, code] of [
      ['nope', 'BAD_USER_INPUT'],
      ['424242', 'NOT_FOUND'],
    ]) {
      const sub = sseSubscribe(s, 'subscription ($id: ID!) { runStatus(id: $id) { id } }', { id }, 'viewer')
      await sub.done
      expect(sub.events[0]?.errors?.[0]?.extensions?.code).toBe(code)
      expect(leakProblems((sub.events[0] ?? {}) as GqlResponse['body'])).toEqual([])
    }
  })
})

describe('definition(id, slug)', () => {
  it('needs exactly one of id and slug', async () => {
    expectError(await gql('{ definition { id } }'), 'BAD_USER_INPUT', /exactly one of id or slug/)
    expectError(
      await gql(`{ definition(id: "${defId}", slug: "inputs") { id } }`),
      'BAD_USER_INPUT',
      /exactly one/,
    )
  })

  it('hostile slugs are just slugs that match nothing', async () => {
    for (const slug of HOSTILE) {
      const r = await gql('query ($s: String) { definition(slug: $s) { id } }', { s: slug })
      expect(r.body).toEqual({ data: { definition: null } })
    }
  })
})

describe('limits and counts', () => {
  it('list limits are clamped to 1..500, never errors', async () => {
    for (const limit of [-5, 0, 1, 499, 500, 501, 1_000_000]) {
      // Two documents: logs(limit: 500) under runs(limit: 500) would ask for 250,000 rows, over the query budget.
      const r = await gql<never>(
        `query ($l: Int) { runs(limit: $l) { id } waitingSteps(limit: $l) { id } }`,
        {
          l: limit,
        },
      )
      expect(r.body.errors, `limit ${limit}`).toBeUndefined()
      const logs = await gql<never>(`query ($l: Int) { runs(limit: 1) { id logs(limit: $l) { id } } }`, {
        l: limit,
      })
      expect(logs.body.errors, `logs limit ${limit}`).toBeUndefined()
    }
  })

  it('a limit that is not a 32-bit integer is BAD_USER_INPUT', async () => {
    for (const limit of [2 ** 31, 1.5, '10', 'abc']) {
      expectError(
        await gql('query ($l: Int) { runs(limit: $l) { id } }', { l: limit }),
        'BAD_USER_INPUT',
        /\$l/,
      )
    }
  })

  it('nextOccurrences(count) must be 1..1000', async () => {
    const q = `query ($c: Int, $a: DateTime) { definition(slug: "inputs") { nextOccurrences(count: $c, after: $a) } }`
    for (const c of [0, -1, 1001, 2 ** 31 - 1]) {
      expectError(await gql(q, { c }), 'BAD_USER_INPUT', /count must be an integer from 1 to 1000/)
    }
    const ok = await gql<{ definition: { nextOccurrences: string[] } }>(q, {
      c: 1000,
      a: '2025-01-01T00:00:00Z',
    })
    expect(ok.body.data?.definition.nextOccurrences).toHaveLength(1000)
    expect(ok.body.data?.definition.nextOccurrences[0]).toBe('2025-01-03T18:00:00.000Z')
  })

  it('nextOccurrences of a manual-only definition is empty (count still checked)', async () => {
    await gql(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "manual", title: "M", program: $p }) { id } }',
      {
        p: SESSION_PROGRAM,
      },
    )
    const r = await gql<{ definition: { nextOccurrences: string[] } }>(
      '{ definition(slug: "manual") { nextOccurrences(count: 3) } }',
    )
    expect(r.body.data?.definition.nextOccurrences).toEqual([])
    expectError(await gql('{ definition(slug: "manual") { nextOccurrences(count: 0) } }'), 'BAD_USER_INPUT')
  })
})

describe('DateTime', () => {
  const BAD_DATES = [
    'tomorrow',
    '2025-13-01T00:00:00Z',
    '2025-02-30T10:00:00Z',
    '2025-06-01T25:00:00Z',
    '2025-06-01T18:30:00',
    '2025-06-01',
    '0999-01-01T00:00:00Z',
    '2025-06-01T18:30:00+15:00',
    '1717264200000',
    'x'.repeat(5000),
  ]

  it('rejects anything but an ISO-8601 date-time with a zone, as a variable or a literal', async () => {
    for (const at of BAD_DATES) {
      const v = await gql(
        'mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }',
        {
          d: defId,
          at,
        },
      )
      expectError(v, 'BAD_USER_INPUT', /ISO-8601 date-time with a time zone/)
      const lit = await gql(
        `{ definition(slug: "inputs") { nextOccurrences(after: ${JSON.stringify(at)}) } }`,
      )
      expectError(lit, 'BAD_USER_INPUT', /ISO-8601 date-time with a time zone/)
    }
    expectError(
      await gql('{ definition(slug: "inputs") { nextOccurrences(after: 1717264200000) } }'),
      'BAD_USER_INPUT',
      /ISO-8601/,
    )
  })

  it('accepts offsets and answers in UTC with a Z', async () => {
    const r = await gql<{ startRun: { scheduledFor: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d, at: "2031-06-01T20:30:00.5+02:00", rehearsal: true) { scheduledFor } }',
      { d: defId },
    )
    expect(r.body.data?.startRun.scheduledFor).toBe('2031-06-01T18:30:00.500Z')
  })
})

describe('createDefinition / updateDefinition / publishVersion', () => {
  const create = (input: Record<string, unknown>) =>
    gql('mutation ($i: CreateDefinitionInput!) { createDefinition(input: $i) { id } }', {
      i: {
        slug: `ok-${Math.random().toString(36).slice(2, 8)}`,
        title: 'T',
        program: SESSION_PROGRAM,
        ...input,
      },
    })

  it('keeps the IANA zone a person wrote (not an older ICU id); fixes a careless spelling', async () => {
    const zoneOf = async (timezone: string) => {
      const r = await gql<{ createDefinition: { timezone: string } }>(
        'mutation ($i: CreateDefinitionInput!) { createDefinition(input: $i) { timezone } }',
        {
          i: {
            slug: `tz-${Math.random().toString(36).slice(2, 8)}`,
            title: 'T',
            timezone,
            program: SESSION_PROGRAM,
          },
        },
      )
      expect(r.body.errors).toBeUndefined()
      return r.body.data?.createDefinition.timezone
    }
    expect(await zoneOf('Asia/Kolkata')).toBe('Asia/Kolkata')
    expect(await zoneOf('Europe/Kyiv')).toBe('Europe/Kyiv')
    expect(await zoneOf('america/new_york')).toBe('America/New_York')
  })

  it.each([
    ['slug', { slug: 'Bad Slug!' }, /slug: use 1–100 lowercase letters/],
    ['slug (hostile)', { slug: "x'; DROP TABLE event_definitions; --" }, /slug:/],
    ['title (empty)', { title: '   ' }, /title: must be 1–200 characters/],
    ['title (huge)', { title: 't'.repeat(5000) }, /title: must be 1–200 characters/],
    ['schedule', { schedule: 'every tuesday' }, /schedule: .*not a valid cron|schedule: .*field/],
    [
      'schedule (61 minutes)',
      { schedule: '61 * * * *' },
      /schedule: "61 \* \* \* \*" is not a valid cron expression/,
    ],
    [
      'timezone',
      { timezone: 'Mars/Olympus_Mons' },
      /timezone: "Mars\/Olympus_Mons" is not an IANA time zone/,
    ],
    ['graceSeconds', { graceSeconds: -1 }, /graceSeconds: must be a whole number/],
    ['scopes (empty)', { scopes: [] }, /scopes: give at least one scope/],
    ['scopes (repeated)', { scopes: ['a', 'a'] }, /scopes: must not repeat/],
    ['concurrencyKey', { concurrencyKey: ' ' }, /concurrencyKey/],
    ['program (a string)', { program: 'just text' }, /program|phases/i],
    [
      'program (unknown kind)',
      { program: { phases: [{ name: 'p', steps: [{ kind: 'core.nope' }] }] } },
      /core\.nope/,
    ],
    [
      'program (bad params)',
      { program: { phases: [{ name: 'p', steps: [{ kind: 'core.wait', params: { seconds: 'soon' } }] }] } },
      /phases\[0\]\.steps\[0\]\.params/,
    ],
  ])('%s → BAD_USER_INPUT with a message naming it', async (_name, input, message) => {
    expectError(await create(input), 'BAD_USER_INPUT', message)
  })

  it('a bad enum value or a missing required field is BAD_USER_INPUT', async () => {
    expectError(await create({ state: 'DELETED' }), 'BAD_USER_INPUT', /DELETED/)
    expectError(
      await gql('mutation ($i: CreateDefinitionInput!) { createDefinition(input: $i) { id } }', {
        i: { slug: 'no-title', program: {} },
      }),
      'BAD_USER_INPUT',
      /title/,
    )
  })

  it('a duplicate slug is CONFLICT', async () => {
    expectError(await create({ slug: 'inputs' }), 'CONFLICT', /already exists/)
  })

  it('update: null for a field that cannot be empty is BAD_USER_INPUT; bad values are named', async () => {
    const u = (input: Record<string, unknown>) =>
      gql('mutation ($id: ID!, $i: UpdateDefinitionInput!) { updateDefinition(id: $id, input: $i) { id } }', {
        id: defId,
        i: input,
      })
    expectError(await u({ title: null, timezone: null }), 'BAD_USER_INPUT', /title, timezone cannot be null/)
    expectError(await u({ timezone: 'Nowhere/Land' }), 'BAD_USER_INPUT', /not an IANA time zone/)
    expectError(await u({ schedule: '* * *' }), 'BAD_USER_INPUT', /3 fields/)
    const ok = await u({ description: null, schedule: null })
    expect(ok.body.errors).toBeUndefined()
  })

  it('publishVersion with an invalid program is BAD_USER_INPUT with the JSON path', async () => {
    expectError(
      await gql('mutation ($id: ID!, $p: JSON!) { publishVersion(definitionId: $id, program: $p) { id } }', {
        id: defId,
        p: { phases: [{ name: 'p', steps: [{ kind: 'core.cue', params: { prompt: 42 } }] }] },
      }),
      'BAD_USER_INPUT',
      /phases\[0\]\.steps\[0\]\.params\.prompt/,
    )
  })
})

describe('run and step controls', () => {
  it('startRun: params must be an object, scope at most 191 characters; hostile scopes are stored as text', async () => {
    const start = (vars: Record<string, unknown>) =>
      gql(
        'mutation ($d: ID!, $scope: String, $params: JSON) { startRun(definitionId: $d, scope: $scope, params: $params, rehearsal: true) { id scope } }',
        {
          d: defId,
          ...vars,
        },
      )
    expectError(await start({ params: [1, 2] }), 'BAD_USER_INPUT', /params must be a JSON object/)
    expectError(await start({ params: 'x' }), 'BAD_USER_INPUT', /params must be a JSON object/)
    expectError(await start({ scope: 's'.repeat(300) }), 'BAD_USER_INPUT', /scope must be at most 191/)
    const hostile = "'); DELETE FROM event_runs; --"
    const ok = await start({ scope: hostile })
    expect((ok.body.data as { startRun: { scope: string } }).startRun.scope).toBe(hostile)
  })

  it('cancelRun reason and resolveCue/skipStep note are length-checked', async () => {
    expectError(
      await gql(
        'mutation ($id: ID!, $r: String) { cancelRun(id: $id, reason: $r) { applied } }',
        { id: runId, r: 'r'.repeat(600) },
        'operator',
      ),
      'BAD_USER_INPUT',
      /reason must be at most 500/,
    )
    expectError(
      await gql(
        'mutation ($id: ID!, $n: String) { resolveCue(stepId: $id, note: $n) { applied } }',
        { id: cueStepId, n: 'n'.repeat(2000) },
        'operator',
      ),
      'BAD_USER_INPUT',
      /at most 1000/,
    )
    expectError(
      await gql(
        'mutation ($id: ID!, $n: String) { skipStep(stepId: $id, reason: $n) { applied } }',
        { id: cueStepId, n: 'n'.repeat(2000) },
        'operator',
      ),
      'BAD_USER_INPUT',
      /at most 1000/,
    )
  })

  it('a guard that does not match is applied: false with the current row, not an error', async () => {
    const r = await gql<{ resumeRun: { applied: boolean; run: { id: string; status: string } } }>(
      `mutation { resumeRun(id: "${runId}") { applied run { id status } } }`,
      undefined,
      'operator',
    )
    expect(r.body.errors).toBeUndefined()
    expect(r.body.data?.resumeRun).toEqual({ applied: false, run: { id: runId, status: 'SCHEDULED' } })
  })

  it('a bad status filter is BAD_USER_INPUT', async () => {
    expectError(
      await gql('query ($s: RunStatus) { runs(status: $s) { id } }', { s: 'running' }),
      'BAD_USER_INPUT',
      /RunStatus/,
    )
    expectError(await gql('{ runs(status: NOPE) { id } }'), 'GRAPHQL_VALIDATION_FAILED', /NOPE/)
  })
})

describe('DATABASE_UNAVAILABLE', () => {
  it('a server whose database is gone answers DATABASE_UNAVAILABLE, health says so, /readyz is 503', async () => {
    const port = await new Promise<number>((resolve) => {
      const srv = createServer()
      srv.listen(0, '127.0.0.1', () => {
        const p = (srv.address() as { port: number }).port
        srv.close(() => resolve(p))
      })
    })
    const config = loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: `mysql://root@127.0.0.1:${port}/nowhere`,
      SHOWRUNNER_TOKENS,
      RUNNER: 'off',
      LOG_LEVEL: 'silent',
    })
    const app = buildApp(config, { logger: silentLogger(), migrate: false })
    const { url } = await app.start()
    try {
      const post = async (query: string, token: string = TOKENS.admin) => {
        const res = await fetch(`${url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          body: JSON.stringify({ query }),
        })
        return { status: res.status, headers: res.headers, body: (await res.json()) as GqlResponse['body'] }
      }
      for (const q of [
        '{ runs { id } }',
        '{ definitions { id } }',
        '{ waitingSteps { id } }',
        'mutation { startRun(definitionId: "1") { id } }',
        'mutation { createDefinition(input: { slug: "x", title: "x", program: { phases: [{ name: "p", steps: [{ kind: "core.log", params: { message: "m" } }] }] } }) { id } }',
      ]) {
        const r = await post(q)
        expectError(r, 'DATABASE_UNAVAILABLE')
        expect(r.body.errors?.[0]?.message).toBe('The database is unavailable; retry shortly.')
      }
      const health = await post('{ health { ok database runners { id } degradedRuns } }', TOKENS.viewer)
      expect(health.body).toEqual({
        data: { health: { ok: false, database: false, runners: [], degradedRuns: 0 } },
      })
      const ready = await fetch(`${url}/readyz`)
      expect(ready.status).toBe(503)
      const body = (await ready.json()) as { ok: boolean; reasons: string[] }
      expect(body.ok).toBe(false)
      expect(body.reasons).toContain('the database does not answer')
      expect(JSON.stringify(body)).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|mysql/)
      expect((await fetch(`${url}/healthz`)).status).toBe(200)
    } finally {
      await app.stop()
    }
  })
})
