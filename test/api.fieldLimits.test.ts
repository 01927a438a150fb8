/**
 * Text inputs longer than their columns are refused as BAD_USER_INPUT naming
 * the field and the limit, before any SQL runs, instead of reaching the
 * database and coming back as "Unexpected error.".
 */
import { GraphQLError } from 'graphql'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DatabaseError } from '../sql/db.ts'
import { createMaskError } from '../src/api/errors.ts'
import { silentLogger } from '../src/log.ts'
import { FIELD_LIMITS } from '../src/operations/definitions.ts'
import { leakProblems, SESSION_PROGRAM, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let defId: string
beforeAll(async () => {
  s = await startTestServer()
  const created = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!) { createDefinition(input: { slug: "limits", title: "Limits", program: $p }) { id } }',
    { variables: { p: SESSION_PROGRAM } },
  )
  defId = created.body.data?.createDefinition.id as string
})
afterAll(async () => {
  await s?.close()
})

/** The longest valid cron of at most `length` characters made of a minute list (exactly 120 for 120). */
function cronOfLength(length: number): string {
  const minutes: number[] = []
  let text = ''
  for (let m = 0; m < 60; m++) {
    const next = [...minutes, m].join(',')
    if (`${next} * * * *`.length > length) break
    minutes.push(m)
    text = `${next} * * * *`
  }
  return text
}

const create = (fields: string) =>
  s.gql(
    `mutation ($p: JSON!) { createDefinition(input: { slug: "l-${Math.random().toString(36).slice(2, 8)}", title: "T", program: $p, ${fields} }) { id schedule } }`,
    { variables: { p: SESSION_PROGRAM } },
  )

function expectRefused(res: Awaited<ReturnType<typeof create>>, pattern: RegExp) {
  expect(res.body.errors?.[0]?.extensions?.code, JSON.stringify(res.body)).toBe('BAD_USER_INPUT')
  expect(res.body.errors?.[0]?.message).toMatch(pattern)
  expect(leakProblems(res.body)).toEqual([])
}

describe('column-length limits on definition inputs', () => {
  it('a schedule of exactly 120 characters is accepted', async () => {
    const cron = cronOfLength(FIELD_LIMITS.schedule)
    expect(cron).toHaveLength(120)
    const res = await create(`schedule: "${cron}"`)
    expect(res.body.errors).toBeUndefined()
  })

  it('createDefinition: a schedule over 120 characters → BAD_USER_INPUT naming the limit', async () => {
    const cron = Array.from({ length: 60 }, (_, m) => m).join(',') + ' * * * *'
    expect(cron.length).toBeGreaterThan(120)
    expectRefused(await create(`schedule: "${cron}"`), /schedule: at most 120 characters/)
  })

  it('updateDefinition: the same', async () => {
    const cron = Array.from({ length: 60 }, (_, m) => m).join(',') + ' * * * *'
    const res = await s.gql(
      `mutation { updateDefinition(id: "${defId}", input: { schedule: "${cron}" }) { id } }`,
    )
    expectRefused(res, /schedule: at most 120 characters/)
  })

  it('a timezone over 64 characters → BAD_USER_INPUT naming the limit', async () => {
    expectRefused(await create(`timezone: "${'Europe/'.repeat(10)}"`), /timezone: at most 64 characters/)
  })

  it.each([
    ['concurrencyKey', `concurrencyKey: "${'k'.repeat(256)}"`, /concurrencyKey: must be 1–255 characters/],
    ['scopes', `scopes: ["${'s'.repeat(192)}"]`, /scopes\[0\]: at most 191 characters/],
    ['description', `description: "${'d'.repeat(10_001)}"`, /description: at most 10,000 characters/],
  ])('%s over its column → BAD_USER_INPUT', async (_name, fields, pattern) => {
    expectRefused(await create(fields), pattern)
  })

  it('a long title and slug are refused the same way', async () => {
    const res = await s.gql(
      `mutation ($p: JSON!) { createDefinition(input: { slug: "${'a'.repeat(101)}", title: "${'t'.repeat(201)}", program: $p }) { id } }`,
      { variables: { p: SESSION_PROGRAM } },
    )
    expectRefused(res, /slug: use 1–100.*title: must be 1–200 characters/)
  })

  it('startRun: a scope over 191 characters → BAD_USER_INPUT', async () => {
    const res = await s.gql(
      `mutation { startRun(definitionId: "${defId}", scope: "${'s'.repeat(192)}") { id } }`,
    )
    expectRefused(res, /scope must be at most 191 characters/)
  })
})

describe('a too-long value that still reaches the database', () => {
  it('is BAD_USER_INPUT naming the field, never the statement', () => {
    const driverError = Object.assign(new Error("Data too long for column 'schedule' at row 1"), {
      errno: 1406,
      code: 'ER_DATA_TOO_LONG',
      sql: 'UPDATE event_definitions SET schedule = ? WHERE id = ?',
    })
    const wrapped = new GraphQLError('x', {
      originalError: new DatabaseError('The database refused a write (ER_DATA_TOO_LONG 1406).', driverError),
      path: ['updateDefinition'],
    })
    const masked = createMaskError(silentLogger())(wrapped, 'x') as GraphQLError
    expect(masked.extensions.code).toBe('BAD_USER_INPUT')
    expect(masked.message).toBe('A value is longer than the schedule field allows; shorten it and retry.')
  })
})
