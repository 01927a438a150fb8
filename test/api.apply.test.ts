/**
 * Shows as code through the real server: exportDefinitions and
 * applyDefinitions (round trip byte for byte, idempotence, versions only for a
 * changed program, dry runs, all-or-nothing validation with every problem's
 * path, prune under the archive rules) and the manifests' JSON Schema, committed
 * and served.
 */
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { definitionSchemaText } from '../src/api/definitionSchema.ts'
import { DEFINITION_SCHEMA_FILE } from '../src/api/schemaPrint.ts'
import { sleep, startTestServer, type TestServer } from './helpers/server.ts'

let source: TestServer
let target: TestServer

beforeAll(async () => {
  // The program below calls example.com: both allow it, or publishing refuses it.
  const env = { WEBHOOK_ALLOW: 'https://example.com/' }
  ;[source, target] = await Promise.all([startTestServer({ env }), startTestServer({ runner: true, env })])
})
afterAll(async () => {
  await Promise.all([source?.close(), target?.close()])
})

const SHOW = {
  phases: [
    {
      name: 'main',
      steps: [
        {
          kind: 'core.webhook',
          params: { url: 'https://example.com/hook', headers: { authorization: 'Bearer s3cret' } },
          retry: { attempts: 2 },
        },
        { kind: 'core.cue', params: { prompt: 'Open the gates' } },
      ],
    },
    { name: 'wrap', ending: true, steps: [{ kind: 'core.log', params: { message: 'bye' } }] },
  ],
}
const LOG = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'hi' } }] }] }
const CUE = { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'go?' } }] }] }

const APPLY = `mutation ($m: JSON!, $dry: Boolean, $prune: Boolean) {
  applyDefinitions(manifests: $m, dryRun: $dry, prune: $prune) { applied changes { slug action fields newVersion } }
}`
interface PlanData {
  applyDefinitions: {
    applied: boolean
    changes: { slug: string; action: string; fields: string[]; newVersion: number | null }[]
  }
}

async function apply(s: TestServer, manifests: unknown, opts: { dry?: boolean; prune?: boolean } = {}) {
  return s.gql<PlanData>(APPLY, { variables: { m: manifests, dry: opts.dry, prune: opts.prune } })
}

async function exported(s: TestServer, slugs?: string[]): Promise<unknown[]> {
  const res = await s.gql<{ exportDefinitions: unknown[] }>(
    'query ($slugs: [String!]) { exportDefinitions(slugs: $slugs) }',
    { variables: { slugs } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.exportDefinitions as unknown[]
}

/** What the tables hold, to prove a call wrote nothing. */
async function tables(s: TestServer) {
  const [defs] = await s.t.db.query<Record<string, unknown>>(
    'SELECT COUNT(*) AS n, COALESCE(MAX(updated_at), 0) AS at, GROUP_CONCAT(state ORDER BY id) AS states FROM event_definitions',
  )
  const [versions] = await s.t.db.query<Record<string, unknown>>('SELECT COUNT(*) AS n FROM event_versions')
  const [audits] = await s.t.db.query<Record<string, unknown>>('SELECT COUNT(*) AS n FROM audit_log')
  return {
    definitions: Number(defs?.n),
    updatedAt: String(defs?.at),
    states: String(defs?.states),
    versions: Number(versions?.n),
    audits: Number(audits?.n),
  }
}

describe('the JSON Schema of a manifest', () => {
  it('is committed as generated (npm run schema:print) and served without a token', async () => {
    expect(readFileSync(DEFINITION_SCHEMA_FILE, 'utf8')).toBe(definitionSchemaText())
    const res = await fetch(`${source.url}/schema/definition.json`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('application/schema+json')
    const schema = (await res.json()) as { properties: Record<string, unknown>; required: string[] }
    expect(Object.keys(schema.properties)).toEqual(
      expect.arrayContaining(['slug', 'title', 'schedule', 'overlap', 'calendars', 'program']),
    )
    expect(schema.required).toEqual(expect.arrayContaining(['slug', 'title', 'program']))
    expect((await fetch(`${source.url}/schema/definition.json`, { method: 'POST' })).status).toBe(405)
  })
})

describe('export, apply, export', () => {
  it('round-trips byte for byte into an empty database; a second apply changes nothing', async () => {
    const created = await source.gql(
      `mutation ($a: CreateDefinitionInput!, $b: CreateDefinitionInput!) {
        a: createDefinition(input: $a) { id } b: createDefinition(input: $b) { id } }`,
      {
        variables: {
          a: {
            slug: 'gates',
            title: 'Open the gates',
            description: 'Every ten minutes',
            schedule: '*/10 * * * *',
            timezone: 'Europe/London',
            scopes: ['north', 'south'],
            graceSeconds: 60,
            concurrencyKey: 'stage:{{run.scope}}',
            overlap: 'SKIP',
            startsAt: '2026-01-01T00:00:00.000Z',
            endsAt: '2036-01-01T00:00:00.000Z',
            state: 'PAUSED',
            program: SHOW,
          },
          b: { slug: 'manual', title: 'By hand', program: LOG },
        },
      },
    )
    expect(created.body.errors).toBeUndefined()
    const first = await exported(source)
    expect(first.map((m) => (m as { slug: string }).slug)).toEqual(['gates', 'manual'])

    const plan = await apply(target, first)
    expect(plan.body.errors).toBeUndefined()
    expect(plan.body.data?.applyDefinitions).toEqual({
      applied: true,
      changes: [
        {
          slug: 'gates',
          action: 'CREATE',
          fields: [
            'title',
            'description',
            'schedule',
            'timezone',
            'scopes',
            'graceSeconds',
            'concurrencyKey',
            'overlap',
            'startsAt',
            'endsAt',
            'state',
            'program',
          ],
          newVersion: 1,
        },
        { slug: 'manual', action: 'CREATE', fields: ['title', 'program'], newVersion: 1 },
      ],
    })
    const second = await exported(target)
    expect(JSON.stringify(second, null, 2)).toBe(JSON.stringify(first, null, 2))

    const before = await tables(target)
    const again = await apply(target, second)
    expect(again.body.data?.applyDefinitions.changes.map((c) => [c.action, c.newVersion])).toEqual([
      ['UNCHANGED', null],
      ['UNCHANGED', null],
    ])
    expect(await tables(target)).toEqual(before)
  })

  it('a changed program is an UPDATE with a new version; key order alone is no change', async () => {
    const [gates] = (await exported(target, ['gates'])) as Record<string, unknown>[]
    const reordered = {
      ...gates,
      program: {
        phases: (SHOW.phases as unknown[])
          .map((p) => ({ ...(p as object) }))
          .reverse()
          .reverse(),
      },
    }
    const same = await apply(target, [reordered])
    expect(same.body.data?.applyDefinitions.changes[0]?.action).toBe('UNCHANGED')

    const changed = { ...gates, title: 'Open the gates!', program: LOG }
    const res = await apply(target, [changed])
    expect(res.body.data?.applyDefinitions.changes).toEqual([
      { slug: 'gates', action: 'UPDATE', fields: ['title', 'program'], newVersion: 2 },
    ])
    const audits = await target.t.db.query<Record<string, unknown>>(
      "SELECT detail FROM audit_log WHERE action = 'applyDefinitions' AND outcome = 'ok' ORDER BY id",
    )
    // Two creates and this update: re-applying wrote none.
    expect(audits).toHaveLength(3)
    const only = await apply(target, [{ ...changed, title: 'Open the gates' }])
    expect(only.body.data?.applyDefinitions.changes).toEqual([
      { slug: 'gates', action: 'UPDATE', fields: ['title'], newVersion: null },
    ])
  })

  it('dryRun answers the plan and writes nothing', async () => {
    const before = await tables(target)
    const res = await apply(
      target,
      [
        { slug: 'brand-new', title: 'New', program: LOG },
        { slug: 'gates', title: 'Gates, changed', program: CUE },
      ],
      { dry: true, prune: true },
    )
    expect(res.body.errors).toBeUndefined()
    expect(res.body.data?.applyDefinitions).toEqual({
      applied: false,
      changes: [
        { slug: 'brand-new', action: 'CREATE', fields: ['title', 'program'], newVersion: 1 },
        {
          slug: 'gates',
          action: 'UPDATE',
          fields: expect.arrayContaining(['title', 'schedule', 'timezone', 'state', 'program']),
          newVersion: 3,
        },
        { slug: 'manual', action: 'ARCHIVE', fields: ['state'], newVersion: null },
      ],
    })
    expect(await tables(target)).toEqual(before)
  })
})

describe('validation', () => {
  it('one bad manifest among good ones: nothing is written, every problem is listed with its path', async () => {
    const before = await tables(target)
    const res = await apply(target, [
      { slug: 'fine-one', title: 'Fine', program: LOG },
      {
        slug: 'Bad Slug',
        title: '',
        schedule: 'every day',
        timezone: 'Mars/Olympus',
        colour: 'red',
        program: {
          phases: [
            {
              name: 'main',
              steps: [
                { kind: 'core.log', params: { message: 'ok' } },
                { kind: 'core.nope' },
                { kind: 'core.webhook', params: { url: 42 } },
              ],
            },
          ],
        },
      },
      { slug: 'fine-one', title: 'Twice', program: LOG, calendars: ['holidays'] },
      'not an object',
    ])
    const error = res.body.errors?.[0]
    expect(error?.extensions?.code).toBe('BAD_USER_INPUT')
    const problems = error?.extensions?.problems as { path: string; message: string }[]
    const paths = problems.map((p) => p.path)
    expect(paths).toEqual(
      expect.arrayContaining([
        '[1].colour',
        '[1].program.phases[0].steps[1].kind',
        '[1].program.phases[0].steps[2].params.url',
        '[1].slug',
        '[1].title',
        '[1].timezone',
        '[2].slug',
        '[2].calendars',
        '[3]',
      ]),
    )
    expect(paths.every((p) => !p.startsWith('[0]'))).toBe(true)
    expect(error?.message).toContain('[1].program.phases[0].steps[2].params.url')
    expect(problems.find((p) => p.path === '[2].calendars')?.message).toContain(
      'no calendar named "holidays"',
    )
    const after = await tables(target)
    expect({ ...after, audits: before.audits }).toEqual(before)
    // The refusal itself is audited, once.
    expect(after.audits).toBe(before.audits + 1)
  })

  it('refuses what is not a list, and a viewer or operator may not apply', async () => {
    const notList = await apply(target, { slug: 'x' })
    expect(notList.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    for (const auth of ['viewer', 'operator'] as const) {
      const res = await target.gql(APPLY, { variables: { m: [] }, auth })
      expect(res.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    }
    const none = await target.gql(APPLY, { variables: { m: [] }, auth: null })
    expect(none.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
  })

  it('export names unknown slugs (NOT_FOUND) and redacts literal headers for a viewer', async () => {
    const missing = await source.gql('{ exportDefinitions(slugs: ["gates", "nope"]) }')
    expect(missing.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
    expect(missing.body.errors?.[0]?.message).toContain('"nope"')
    const viewer = await source.gql<{ exportDefinitions: { program: typeof SHOW }[] }>(
      '{ exportDefinitions(slugs: ["gates"]) }',
      { auth: 'viewer' },
    )
    const hook = viewer.body.data?.exportDefinitions[0]?.program.phases[0]?.steps[0]
    expect(hook?.params).toEqual({
      url: 'https://example.com/hook',
      headers: { authorization: '[redacted]' },
    })
    // Applying that export would overwrite the real header: refused, nothing written.
    const before = await tables(source)
    const res = await apply(source, viewer.body.data?.exportDefinitions)
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(res.body.errors?.[0]?.extensions?.problems).toEqual([
      {
        path: '[0].program.phases[0].steps[0].params.headers["authorization"]',
        message: expect.stringContaining('exported without an admin token'),
      },
    ])
    expect(await tables(source)).toEqual(before)
  })
})

describe('calendars', () => {
  it('a manifest names its blackout calendars; export writes them; re-applying changes nothing', async () => {
    const cal = await target.gql(
      `mutation { createCalendar(input: { name: "bank-holidays", timezone: "Europe/London",
        entries: [{ from: "2026-12-25", yearly: true }] }) { id } }`,
    )
    expect(cal.body.errors).toBeUndefined()
    const manifest = { slug: 'xmas', title: 'Not on Christmas', schedule: '0 9 * * *', program: LOG }
    const created = await apply(target, [{ ...manifest, calendars: ['bank-holidays'] }])
    expect(created.body.data?.applyDefinitions.changes[0]?.fields).toContain('calendars')
    const read = await target.gql<{ definition: { calendars: { name: string }[] } }>(
      '{ definition(slug: "xmas") { calendars { name } } }',
    )
    expect(read.body.data?.definition.calendars).toEqual([{ name: 'bank-holidays' }])
    const [xmas] = (await exported(target, ['xmas'])) as Record<string, unknown>[]
    expect(xmas?.calendars).toEqual(['bank-holidays'])
    const before = await tables(target)
    const again = await apply(target, [xmas])
    expect(again.body.data?.applyDefinitions.changes[0]?.action).toBe('UNCHANGED')
    expect(await tables(target)).toEqual(before)
    const dropped = await apply(target, [manifest])
    expect(dropped.body.data?.applyDefinitions.changes[0]).toMatchObject({
      action: 'UPDATE',
      fields: ['calendars'],
    })
    const after = await target.gql<{ definition: { calendars: unknown[] } }>(
      '{ definition(slug: "xmas") { calendars { name } } }',
    )
    expect(after.body.data?.definition.calendars).toEqual([])
  })
})

describe('prune', () => {
  it('archives the definitions no manifest names, refused (nothing written) while a run is in progress', async () => {
    const created = await apply(target, [
      { slug: 'keep', title: 'Keep', program: LOG },
      { slug: 'live', title: 'Live', program: CUE },
    ])
    expect(created.body.errors).toBeUndefined()
    const live = await target.gql<{ definition: { id: string } }>('{ definition(slug: "live") { id } }')
    const start = await target.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
      { variables: { d: live.body.data?.definition.id } },
    )
    const runId = start.body.data?.startRun.id as string
    for (let i = 0; i < 100; i++) {
      const r = await target.gql<{ run: { status: string } }>(
        'query ($id: ID!) { run(id: $id) { status } }',
        {
          variables: { id: runId },
        },
      )
      if (r.body.data?.run.status === 'RUNNING') break
      await sleep(50)
    }
    const before = await tables(target)
    const refused = await apply(target, [{ slug: 'keep', title: 'Keep', program: LOG }], { prune: true })
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
    expect(refused.body.errors?.[0]?.message).toContain('"live" has 1 run in progress')
    const after = await tables(target)
    expect({ ...after, audits: before.audits }).toEqual(before)

    await target.gql('mutation ($id: ID!) { cancelRun(id: $id) { applied } }', { variables: { id: runId } })
    const pruned = await apply(target, [{ slug: 'keep', title: 'Keep', program: LOG }], { prune: true })
    expect(pruned.body.errors).toBeUndefined()
    const changes = pruned.body.data?.applyDefinitions.changes ?? []
    expect(changes[0]).toEqual({ slug: 'keep', action: 'UNCHANGED', fields: [], newVersion: null })
    expect(changes.filter((c) => c.action === 'ARCHIVE').map((c) => c.slug)).toEqual(
      expect.arrayContaining(['gates', 'live', 'manual', 'xmas']),
    )
    const states = await target.gql<{ definitions: { slug: string; state: string }[] }>(
      '{ definitions(includeArchived: true) { slug state } }',
    )
    expect(states.body.data?.definitions.filter((d) => d.state !== 'ARCHIVED').map((d) => d.slug)).toEqual([
      'keep',
    ])
    const again = await apply(target, [{ slug: 'keep', title: 'Keep', program: LOG }], { prune: true })
    expect(again.body.data?.applyDefinitions.changes).toEqual([
      { slug: 'keep', action: 'UNCHANGED', fields: [], newVersion: null },
    ])
  })
})
