/**
 * The overlap policy through the API: set on create, read back, changed by
 * update (which applies to every run not yet started), and refused when it is
 * not one of the four names.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] }

async function scheduledOverlaps(definitionId: string): Promise<(string | null)[]> {
  const rows = await s.t.db.query<{ overlap: string | null }>(
    `SELECT DISTINCT overlap FROM event_runs WHERE definition_id = ? AND status = 'scheduled'`,
    [Number(definitionId)],
  )
  return rows.map((r) => r.overlap)
}

describe('overlap through the API', () => {
  it('create, read, update (applied to the runs not yet started), refuse an unknown policy', async () => {
    const created = await s.gql<{ createDefinition: { id: string; overlap: string } }>(
      `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id overlap } }`,
      {
        variables: {
          input: { slug: 'ov-api', title: 'ov', schedule: '0 * * * *', program: LOG_ONLY, overlap: 'SKIP' },
        },
      },
    )
    expect(created.body.errors).toBeUndefined()
    const id = created.body.data?.createDefinition.id as string
    expect(created.body.data?.createDefinition.overlap).toBe('SKIP')
    await expect.poll(() => scheduledOverlaps(id), { timeout: 10_000 }).toEqual(['skip'])

    const updated = await s.gql<{ updateDefinition: { overlap: string } }>(
      `mutation ($id: ID!) { updateDefinition(id: $id, input: { overlap: BUFFER_ONE }) { overlap } }`,
      { variables: { id } },
    )
    expect(updated.body.data?.updateDefinition.overlap).toBe('BUFFER_ONE')
    expect(await scheduledOverlaps(id)).toEqual(['buffer_one'])

    const back = await s.gql<{ updateDefinition: { overlap: string } }>(
      `mutation ($id: ID!) { updateDefinition(id: $id, input: { overlap: ALLOW_ALL }) { overlap } }`,
      { variables: { id } },
    )
    expect(back.body.data?.updateDefinition.overlap).toBe('ALLOW_ALL')
    // ALLOW_ALL runs go back to the set-wise start path.
    expect(await scheduledOverlaps(id)).toEqual([null])

    const wrong = await s.gql(
      `mutation ($id: ID!) { updateDefinition(id: $id, input: { overlap: QUEUE }) { id } }`,
      {
        variables: { id },
      },
    )
    expect(wrong.body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED')
    const nulled = await s.gql(
      `mutation ($id: ID!) { updateDefinition(id: $id, input: { overlap: null }) { id } }`,
      {
        variables: { id },
      },
    )
    expect(nulled.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  })
})
