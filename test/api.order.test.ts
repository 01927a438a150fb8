/**
 * A response map is ordered as its selection set, at every depth, whatever
 * the operation (query, mutation, subscription) and transport (HTTP, SSE,
 * graphql-ws). Selections are deliberately in unusual orders, with async
 * fields (nextOccurrences, currentVersion, definition) ahead of plain ones,
 * because an executor that writes each key when its value resolves puts the
 * slow ones last.
 */
import { type DocumentNode, Kind, parse, type SelectionSetNode } from 'graphql'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  SESSION_PROGRAM,
  sseSubscribe,
  startTestServer,
  type TestServer,
  wsClient,
} from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer()
})
afterAll(async () => {
  await s?.close()
})

/**
 * Every object in `data` whose keys are not in the order the document asks
 * for, as "path: got [..] expected [..]". The documents here use no fragments
 * and no aliases twice, so the expected order is the selection's field order.
 */
function outOfOrder(document: DocumentNode, data: unknown): string[] {
  const problems: string[] = []
  const walk = (value: unknown, set: SelectionSetNode, path: string) => {
    if (value === null || value === undefined) return
    if (Array.isArray(value)) {
      for (const [i, v] of value.entries()) walk(v, set, `${path}[${i}]`)
      return
    }
    const fields = set.selections.filter((sel) => sel.kind === Kind.FIELD)
    const expected = fields.map((f) => f.alias?.value ?? f.name.value)
    const got = Object.keys(value as object)
    if (JSON.stringify(got) !== JSON.stringify(expected)) {
      problems.push(`${path || '(root)'}: got [${got}] expected [${expected}]`)
    }
    for (const f of fields) {
      if (f.selectionSet) {
        const key = f.alias?.value ?? f.name.value
        walk((value as Record<string, unknown>)[key], f.selectionSet, `${path}.${key}`)
      }
    }
  }
  const op = document.definitions.find((d) => d.kind === Kind.OPERATION_DEFINITION)
  if (!op || op.kind !== Kind.OPERATION_DEFINITION) throw new Error('no operation')
  walk(data, op.selectionSet, '')
  return problems
}

const CREATE = `mutation ($p: JSON!, $slug: String!) {
  createDefinition(input: { slug: $slug, title: "Order", schedule: "0 20 * * FRI", timezone: "Europe/London", program: $p }) {
    currentVersion { version program id }
    nextOccurrences(count: 1)
    slug
    id
  }
}`

const START = `mutation ($d: ID!) {
  zeta: startRun(definitionId: $d, params: { name: "Ada" }) {
    waitingSteps
    definition { title currentVersion { version } slug }
    version { version id }
    status
    id
  }
}`

const QUERY = `query ($slug: String!) {
  definition(slug: $slug) {
    versions { id version }
    nextOccurrences(count: 2)
    title
    runs: id
    currentVersion { program version }
  }
  health { database waitingSteps }
}`

let slugSeq = 0
async function createOverHttp(): Promise<{ id: string; slug: string }> {
  const slug = `order-${++slugSeq}`
  const res = await s.gql<{ createDefinition: { id: string } }>(CREATE, {
    variables: { p: SESSION_PROGRAM, slug },
  })
  expect(res.body.errors).toBeUndefined()
  expect(outOfOrder(parse(CREATE), res.body.data)).toEqual([])
  return { id: res.body.data?.createDefinition.id as string, slug }
}

describe('response maps follow the selection order', () => {
  it('over HTTP: mutations, aliased root fields and queries', async () => {
    const def = await createOverHttp()
    const started = await s.gql(START, { variables: { d: def.id } })
    expect(started.body.errors).toBeUndefined()
    expect(outOfOrder(parse(START), started.body.data)).toEqual([])
    const queried = await s.gql(QUERY, { variables: { slug: def.slug } })
    expect(queried.body.errors).toBeUndefined()
    expect(outOfOrder(parse(QUERY), queried.body.data)).toEqual([])
  })

  it('over graphql-ws: mutations, queries and a subscription', async () => {
    const client = wsClient(s, 'admin')
    try {
      const once = <T>(query: string, variables: Record<string, unknown>) =>
        new Promise<{ data?: T; errors?: unknown }>((resolve, reject) => {
          let result: { data?: T; errors?: unknown } = {}
          client.subscribe<T>(
            { query, variables },
            { next: (r) => (result = r as never), error: reject, complete: () => resolve(result) },
          )
        })
      const created = await once<{ createDefinition: { id: string } }>(CREATE, {
        p: SESSION_PROGRAM,
        slug: `order-ws-${++slugSeq}`,
      })
      expect(created.errors).toBeUndefined()
      expect(outOfOrder(parse(CREATE), created.data)).toEqual([])
      const id = created.data?.createDefinition.id as string

      const started = await once<{ zeta: { id: string } }>(START, { d: id })
      expect(started.errors).toBeUndefined()
      expect(outOfOrder(parse(START), started.data)).toEqual([])

      const queried = await once(QUERY, { slug: `order-ws-${slugSeq}` })
      expect(queried.errors).toBeUndefined()
      expect(outOfOrder(parse(QUERY), queried.data)).toEqual([])

      const SUB = `subscription ($id: ID!) { runStatus(id: $id) { waitingSteps updatedAt status id health currentPhase } }`
      const first = await new Promise<{ data?: unknown }>((resolve, reject) => {
        const stop = client.subscribe(
          { query: SUB, variables: { id: started.data?.zeta.id } },
          {
            next: (r) => {
              stop()
              resolve(r)
            },
            error: reject,
            complete: () => {},
          },
        )
      })
      expect(outOfOrder(parse(SUB), first.data)).toEqual([])
    } finally {
      await client.dispose()
    }
  })

  it('over SSE: a subscription', async () => {
    const def = await createOverHttp()
    const started = await s.gql<{ zeta: { id: string } }>(START, { variables: { d: def.id } })
    const SUB = `subscription ($id: ID!) { runStatus(id: $id) { updatedAt id currentPhase waitingSteps status } }`
    const sub = sseSubscribe(s, SUB, { id: started.body.data?.zeta.id })
    try {
      const first = await sub.until(() => true)
      expect(outOfOrder(parse(SUB), first.data)).toEqual([])
    } finally {
      sub.stop()
    }
  })
})

describe('running on graphql-js keeps what the executor answered before', () => {
  it('invalid variables are a 400 BAD_USER_INPUT for mutations and queries alike', async () => {
    const mutation = await s.gql('mutation ($d: ID!) { startRun(definitionId: $d) { id } }', {
      variables: { d: { not: 'an id' } },
    })
    const query = await s.gql('query ($slug: String!) { definition(slug: $slug) { id } }', {
      variables: { slug: 42 },
    })
    for (const res of [mutation, query]) {
      expect(res.status, JSON.stringify(res.body)).toBe(400)
      expect(res.body.data).toBeUndefined()
      expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    }
  })
})
