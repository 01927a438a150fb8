/**
 * backfillRuns and startsAt/endsAt through the real server with its runner:
 * the same instants as nextOccurrences across DST changes (New York's hour,
 * Lord Howe's half hour), idempotent on the occurrence, capped per call, run
 * however late (never MISSED for lateness), startedBy the caller, audited; and
 * schedule bounds that hold in nextOccurrences, backfill and materialisation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as audit from '../sql/auditLog.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] }

async function create(input: Record<string, unknown>): Promise<string> {
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    { variables: { input: { title: 't', program: LOG_ONLY, graceSeconds: 0, ...input } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

interface Backfill {
  created: number
  existing: number
  runs: { id: string; scope: string; scheduledFor: string; startedBy: string; status: string }[]
}

function backfill(
  definitionId: string,
  from: string,
  to: string,
  scopes?: string[],
  auth = 'operator' as const,
) {
  return s.gql<{ backfillRuns: Backfill }>(
    `mutation ($d: ID!, $from: DateTime!, $to: DateTime!, $scopes: [String!]) {
       backfillRuns(definitionId: $d, from: $from, to: $to, scopes: $scopes) {
         created existing runs { id scope scheduledFor startedBy status } } }`,
    { variables: { d: definitionId, from, to, scopes }, auth },
  )
}

async function nextOccurrences(id: string, after: string): Promise<string[]> {
  const res = await s.gql<{ definition: { nextOccurrences: string[] } }>(
    `query ($id: ID!, $after: DateTime) { definition(id: $id) { nextOccurrences(count: 1000, after: $after) } }`,
    { variables: { id, after } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.definition.nextOccurrences ?? []
}

const iso = (ms: number) => new Date(ms).toISOString()

describe('backfillRuns', () => {
  for (const [zone, from, to] of [
    ['America/New_York', '2026-03-07T12:00:00.000Z', '2026-03-09T12:00:00.000Z'],
    ['America/New_York', '2026-10-31T12:00:00.000Z', '2026-11-02T12:00:00.000Z'],
    ['Australia/Lord_Howe', '2026-04-04T00:00:00.000Z', '2026-04-06T00:00:00.000Z'],
    ['Australia/Lord_Howe', '2026-10-03T00:00:00.000Z', '2026-10-05T00:00:00.000Z'],
  ] as const) {
    it(`over a DST change in ${zone} (${from.slice(0, 10)}): exactly nextOccurrences' instants; a second call creates 0`, async () => {
      const id = await create({
        slug: `bf-${zone.replace(/\W/g, '-').toLowerCase()}-${from.slice(5, 7)}`,
        schedule: '*/30 1-3 * * *',
        timezone: zone,
        scopes: ['a', 'b'],
      })
      const expected = (await nextOccurrences(id, iso(Date.parse(from) - 1))).filter((t) => t < to)
      expect(expected.length).toBeGreaterThan(4)
      const first = await backfill(id, from, to)
      expect(first.body.errors).toBeUndefined()
      const result = first.body.data?.backfillRuns as Backfill
      expect(result.created).toBe(expected.length * 2)
      expect(result.existing).toBe(0)
      for (const scope of ['a', 'b']) {
        expect(result.runs.filter((r) => r.scope === scope).map((r) => r.scheduledFor)).toEqual(expected)
      }
      expect(new Set(result.runs.map((r) => r.startedBy))).toEqual(
        new Set([expect.stringMatching(/^operator#/)]),
      )

      const again = await backfill(id, from, to)
      expect(again.body.data?.backfillRuns).toMatchObject({ created: 0, existing: expected.length * 2 })
      expect(again.body.data?.backfillRuns.runs.map((r) => r.id)).toEqual(result.runs.map((r) => r.id))

      // Months late with a grace of 0 s: started all the same, never MISSED.
      await expect
        .poll(
          async () => {
            const rows = await s.t.db.query<{ status: string; n: number }>(
              `SELECT status, COUNT(*) AS n FROM event_runs
                WHERE definition_id = ? AND scheduled_for < ? GROUP BY status`,
              [Number(id), new Date(to)],
            )
            return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]))
          },
          { timeout: 15_000 },
        )
        .toEqual({ completed: expected.length * 2 })
      const [entry] = await audit.list(s.t.db, { targetType: 'definition', targetId: id, limit: 1 })
      expect(entry).toMatchObject({
        action: 'backfillRuns',
        actor: expect.stringMatching(/^operator#/),
        outcome: 'ok',
        detail: { created: 0, existing: expected.length * 2 },
      })
    }, 30_000)
  }

  it('refuses more than 1000 occurrences per call, naming the cap; a viewer may not backfill', async () => {
    const id = await create({ slug: 'bf-cap', schedule: '* * * * *', scopes: ['a', 'b'] })
    // 501 minutes × 2 scopes = 1002 occurrences.
    const res = await backfill(id, '2026-01-01T00:00:00.000Z', '2026-01-01T08:21:00.000Z')
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(res.body.errors?.[0]?.message).toMatch(/at most 1000 occurrences/)
    // 500 minutes × 2 = 1000 is fine, and one scope given explicitly halves it.
    const ok = await backfill(id, '2026-01-01T00:00:00.000Z', '2026-01-01T08:20:00.000Z', ['a'])
    expect(ok.body.data?.backfillRuns.created).toBe(500)
    const viewer = await s.gql(
      `mutation { backfillRuns(definitionId: "${id}", from: "2026-01-01T00:00:00Z", to: "2026-01-02T00:00:00Z") { created } }`,
      { auth: 'viewer' },
    )
    expect(viewer.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const backwards = await backfill(id, '2026-01-02T00:00:00.000Z', '2026-01-01T00:00:00.000Z')
    expect(backwards.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  })
})

describe('startsAt / endsAt', () => {
  it('no occurrence outside them: nextOccurrences, backfill and the materialised runs', async () => {
    const startsAt = '2026-01-01T00:10:00.000Z'
    const endsAt = '2026-01-01T00:20:00.000Z'
    const id = await create({ slug: 'bounded', schedule: '*/5 * * * *', startsAt, endsAt })
    expect(await nextOccurrences(id, '2025-12-31T23:00:00.000Z')).toEqual([
      '2026-01-01T00:10:00.000Z',
      '2026-01-01T00:15:00.000Z',
      '2026-01-01T00:20:00.000Z',
    ])
    const bf = await backfill(id, '2026-01-01T00:00:00.000Z', '2026-01-01T01:00:00.000Z')
    expect(bf.body.data?.backfillRuns.runs.map((r) => r.scheduledFor)).toEqual([
      '2026-01-01T00:10:00.000Z',
      '2026-01-01T00:15:00.000Z',
      '2026-01-01T00:20:00.000Z',
    ])
    const read = await s.gql<{ definition: { startsAt: string; endsAt: string; overlap: string } }>(
      `{ definition(id: "${id}") { startsAt endsAt overlap } }`,
    )
    expect(read.body.data?.definition).toEqual({ startsAt, endsAt, overlap: 'ALLOW_ALL' })
    const wrong = await s.gql(
      `mutation { updateDefinition(id: "${id}", input: { endsAt: "2025-01-01T00:00:00Z" }) { id } }`,
    )
    expect(wrong.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(wrong.body.errors?.[0]?.message).toMatch(/endsAt/)

    // Materialisation: a per-second schedule bounded to the next few seconds.
    const now = Date.now()
    const live = await create({
      slug: 'bounded-live',
      schedule: '* * * * * *',
      graceSeconds: 5,
      startsAt: iso(now + 2_000),
      endsAt: iso(now + 4_000),
    })
    await expect
      .poll(
        async () =>
          (
            await s.t.db.query<{ n: number }>(
              `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status = 'completed'`,
              [Number(live)],
            )
          )[0]?.n,
        { timeout: 10_000 },
      )
      .toBeGreaterThan(0)
    const instants = await s.t.db.query<{ at: Date }>(
      'SELECT scheduled_for AS at FROM event_runs WHERE definition_id = ?',
      [Number(live)],
    )
    for (const { at } of instants) {
      expect(at.getTime()).toBeGreaterThanOrEqual(now + 2_000)
      expect(at.getTime()).toBeLessThanOrEqual(now + 4_000)
    }
  }, 20_000)
})
