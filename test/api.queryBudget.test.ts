/**
 * The query budget: alias, token, introspection, cost and occurrence limits.
 * Floods are refused as GRAPHQL_VALIDATION_FAILED naming the limit, quickly
 * and without a single statement; what a console sends still passes.
 */
import { getIntrospectionQuery, print } from 'graphql'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RUN, STANDBY, STANDBY_PAGE_SIZE } from '../console/app/operations.ts'
import {
  type GqlResponse,
  SESSION_PROGRAM,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

let s: TestServer
beforeAll(async () => {
  s = await startTestServer({ env: { MAX_OCCURRENCES_PER_REQUEST: '1500' } })
  for (const slug of ['budget-a', 'budget-b']) {
    const res = await s.gql(
      `mutation ($p: JSON!) { createDefinition(input: { slug: "${slug}", title: "B", schedule: "* * * * *", program: $p }) { id } }`,
      { variables: { p: SESSION_PROGRAM } },
    )
    expect(res.body.errors).toBeUndefined()
  }
})
afterAll(async () => {
  await s?.close()
})

/** Send `query` as a viewer; answer the response, the time it took and the statements it ran. */
async function timed(
  query: string,
  variables?: Record<string, unknown>,
): Promise<GqlResponse & { ms: number; statements: number }> {
  const before = s.app.db.stats.statements
  const t0 = performance.now()
  const res = await s.gql(query, { auth: 'viewer', variables })
  return { ...res, ms: performance.now() - t0, statements: s.app.db.stats.statements - before }
}

function expectRefused(res: Awaited<ReturnType<typeof timed>>, pattern: RegExp) {
  expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(400)
  expect(res.body.data).toBeUndefined()
  expect(res.body.errors?.every((e) => e.extensions?.code === 'GRAPHQL_VALIDATION_FAILED')).toBe(true)
  expect(JSON.stringify(res.body)).not.toContain('"http"')
  expect(res.body.errors?.map((e) => e.message).join('\n')).toMatch(pattern)
  expect(res.statements).toBe(0)
  expect(res.ms).toBeLessThan(500)
}

const aliased = (n: number, field: string) =>
  `{ ${Array.from({ length: n }, (_, i) => `a${i}: ${field}`).join(' ')} }`

describe('alias and token limits', () => {
  it('31 aliases → refused, naming the limit and its variable', async () => {
    expectRefused(
      await timed(aliased(31, 'definitions { id }')),
      /Aliases limit of 30 exceeded.*\(MAX_QUERY_ALIASES\)/,
    )
  })

  it('30 aliases pass', async () => {
    const res = await timed(aliased(30, 'definitions { id }'))
    expect(res.status).toBe(200)
    expect(Object.keys(res.body.data ?? {})).toHaveLength(30)
  })

  it('an aliased health flood (40, and 1,400) runs no statement', async () => {
    expectRefused(await timed(aliased(40, 'health { ok database }')), /Aliases limit of 30/)
    expectRefused(
      await timed(aliased(1400, 'health { ok }')),
      /Token limit of 2000 exceeded.*MAX_QUERY_TOKENS/,
    )
  })

  it('a token flood is refused at the first token past the limit', async () => {
    const res = await timed(`{ runs { ${'id '.repeat(5000)} } }`)
    expectRefused(res, /Token limit of 2000 exceeded: the document is too long \(MAX_QUERY_TOKENS\)/)
  })
})

describe('repeated fields', () => {
  it('one field selected hundreds of times in a set is refused before the quadratic standard rules run', async () => {
    const res = await timed(`{ definitions { ${'id '.repeat(1900)} } }`)
    expectRefused(res, /Repeated field limit: "id" is selected 1900 times in one selection set; at most 20/)
  })

  it('the same through fragments', async () => {
    const res = await timed(
      `{ definitions { ...A ...A ...B } } fragment A on EventDefinition { ${'id '.repeat(15)} } fragment B on EventDefinition { id }`,
    )
    expectRefused(res, /Repeated field limit/)
  })
})

describe('introspection costs like anything else', () => {
  it('the full introspection query GraphiQL sends passes', async () => {
    const res = await timed(getIntrospectionQuery({ descriptions: true, inputValueDeprecation: true }))
    expect(res.status).toBe(200)
    expect(JSON.stringify(res.body.data)).toContain('EventRun')
  })

  it('two __schema in one operation → refused', async () => {
    expectRefused(
      await timed('{ a: __schema { queryType { name } } b: __schema { queryType { name } } }'),
      /at most 1 __schema per operation/,
    )
  })

  it('an introspection flood (200 aliased __schema in 25 KB) is refused quickly', async () => {
    const one = '__schema { types { name fields { name type { name kind ofType { name } } } } }'
    const query = aliased(200, one)
    expect(query.length).toBeGreaterThan(15_000)
    expectRefused(await timed(query), /limit/i)
  })

  it('introspection nesting lists to multiply its answer → refused', async () => {
    const q =
      '{ __type(name: "Query") { fields { type { fields { type { fields { type { fields { name } } } } } } } } }'
    expectRefused(await timed(q), /nest at most 3 deep inside __schema or __type/)
  })
})

describe('cost counts what comes back', () => {
  it('limit multiplies the cost of what is under it', async () => {
    const q = '{ runs(limit: 500) { logs(limit: 50) { id } } }'
    expectRefused(
      await timed(q),
      /Query cost limit: this operation costs \d+; at most 20000 \(MAX_QUERY_COST\)/,
    )
  })

  // Costs 121 per run: 12,100 at limit 100, 60,500 at 500 (the cap is 20,000).
  const VARIABLE_SIZED = 'query ($n: Int) { a: runs(limit: $n) { logs(limit: 120) { id } } }'

  it('a size given as a variable counts at the value sent: within budget passes', async () => {
    const res = await timed(VARIABLE_SIZED, { n: 100 })
    expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200)
    expect(res.body.errors).toBeUndefined()
  })

  it('the same document with a larger value is refused before any statement, as HTTP 400', async () => {
    expectRefused(
      await timed(VARIABLE_SIZED, { n: 500 }),
      /^Query cost limit: this operation costs 60500 with the variables sent; at most 20000 \(MAX_QUERY_COST\)/,
    )
    // Past the server's maximum the value counts as the resolvers clamp it (500).
    expectRefused(await timed(VARIABLE_SIZED, { n: 100_000 }), /costs 60500 with the variables sent/)
  })

  it("a variable's default counts only when the request leaves the variable out", async () => {
    const q = 'query ($n: Int = 1) { runs(limit: $n) { logs(limit: 120) { id } } }'
    expectRefused(
      await timed(q, { n: 500 }),
      /Query cost limit: this operation costs 60500 with the variables sent/,
    )
    const omitted = await timed(q)
    expect(omitted.status, JSON.stringify(omitted.body).slice(0, 300)).toBe(200)
    expect(omitted.body.errors).toBeUndefined()
  })

  it('an absent or null size counts at the argument default, as the resolver reads it', async () => {
    // runs' limit defaults to 100: 12,100.
    for (const variables of [{}, { n: null }]) {
      const res = await timed(VARIABLE_SIZED, variables)
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200)
    }
  })

  it('a document over budget whatever its variables is still refused at validation', async () => {
    // The literal 500 alone costs 500 × (1 + 220) = 110,500; $n counts as 1 here.
    const q = 'query ($n: Int) { runs(limit: 500) { logs(limit: 220) { id } } a: runs(limit: $n) { id } }'
    const res = await timed(q, { n: 1 })
    // The validation-time message: no "with the variables sent".
    expectRefused(res, /^Query cost limit: this operation costs 110501; at most 20000 \(MAX_QUERY_COST\)/)
  })

  it('what a console sends passes: stand-by (a page of runs with their steps) and a run page', async () => {
    const standby = await timed(print(STANDBY), { first: STANDBY_PAGE_SIZE })
    expect(standby.status, JSON.stringify(standby.body).slice(0, 300)).toBe(200)
    expect(standby.body.errors).toBeUndefined()
    const run = await timed(print(RUN), { id: '1' })
    expect(run.status, JSON.stringify(run.body).slice(0, 300)).toBe(200)
    expect(run.body.errors).toBeUndefined()
  })

  it('a run weighs its steps at the program limit (1,000), not a guess of 10: 100 runs with their steps are refused', async () => {
    const res = await timed(`{ runs(limit: 100) { id steps { id kind status } } }`)
    expectRefused(res, /Query cost limit: this operation costs 100100; at most 20000/)
  })
})

describe('occurrences per request', () => {
  it('{ definitions { a1: nextOccurrences(count: 1000) … a300 } } is refused quickly', async () => {
    const q = `{ definitions { ${Array.from({ length: 300 }, (_, i) => `a${i}: nextOccurrences(count: 1000)`).join(' ')} } }`
    expectRefused(await timed(q), /limit/i)
  })

  it('counts summed over aliases pass the cap → refused naming it', async () => {
    const q = '{ definitions { a: nextOccurrences(count: 1000) b: nextOccurrences(count: 501) } }'
    expectRefused(
      await timed(q),
      /Occurrence limit: this operation asks for 1501 schedule occurrences in all .*at most 1500 \(MAX_OCCURRENCES_PER_REQUEST\)/,
    )
  })

  it('counts given as variables are counted at the values sent', async () => {
    const q =
      'query ($c: Int!) { definition(slug: "budget-a") { a: nextOccurrences(count: $c) b: nextOccurrences(count: $c) } }'
    const within = await timed(q, { c: 700 })
    expect(within.status, JSON.stringify(within.body).slice(0, 300)).toBe(200)
    expect(within.body.errors).toBeUndefined()
    expectRefused(
      await timed(q, { c: 800 }),
      /^Occurrence limit: this operation asks for 1600 schedule occurrences in all with the variables sent .*at most 1500 \(MAX_OCCURRENCES_PER_REQUEST\)/,
    )
  })

  it('a list the document cannot size is capped as it runs', async () => {
    // One alias of 1000 passes validation; two scheduled definitions make 2000 > 1500.
    const res = await s.gql('{ definitions { slug nextOccurrences(count: 1000) } }', { auth: 'viewer' })
    expect(res.body.errors?.[0]?.extensions?.code, JSON.stringify(res.body).slice(0, 300)).toBe(
      'BAD_USER_INPUT',
    )
    expect(res.body.errors?.[0]?.message).toMatch(/Occurrence limit.*1500, MAX_OCCURRENCES_PER_REQUEST/)
    expect(res.body.errors?.[0]?.path).toEqual(['definitions', 1, 'nextOccurrences'])
    // Each on its own is within the cap.
    const one = await s.gql<{ definition: { nextOccurrences: string[] } }>(
      '{ definition(slug: "budget-a") { nextOccurrences(count: 1000) } }',
      { auth: 'viewer' },
    )
    expect(one.body.data?.definition.nextOccurrences).toHaveLength(1000)
  })
})

describe('over graphql-ws, variables count at the values sent', () => {
  it('a query: within budget answers data, a larger value is refused without data', async () => {
    const client = wsClient(s, 'viewer')
    try {
      const q = 'query ($n: Int) { runs(limit: $n) { logs(limit: 120) { id } } }'
      const ok = wsSubscribe(client, q, { n: 100 })
      await ok.done
      expect(ok.events[0]?.errors).toBeUndefined()
      expect(ok.events[0]?.data).toBeDefined()
      const refused = wsSubscribe(client, q, { n: 500 })
      await refused.done
      expect(refused.events).toHaveLength(1)
      expect(refused.events[0]?.data).toBeUndefined()
      expect(refused.events[0]?.errors?.[0]?.extensions).toEqual({ code: 'GRAPHQL_VALIDATION_FAILED' })
      expect(refused.events[0]?.errors?.[0]?.message).toMatch(
        /Query cost limit: this operation costs 60500 with the variables sent; at most 20000 \(MAX_QUERY_COST\)/,
      )
    } finally {
      await client.dispose()
    }
  })

  it('a subscription: within budget streams, a larger value is refused before it starts', async () => {
    const client = wsClient(s, 'viewer')
    try {
      // 122 per waiting step: 12,200 at 100, 61,000 at 500.
      const q = 'subscription ($n: Int) { waitingSteps(limit: $n) { run { logs(limit: 120) { id } } } }'
      const ok = wsSubscribe<{ waitingSteps: unknown[] }>(client, q, { n: 100 })
      const first = await ok.until(() => true)
      expect(first.errors).toBeUndefined()
      expect(first.data?.waitingSteps).toEqual([])
      ok.stop()
      const refused = wsSubscribe(client, q, { n: 500 })
      await refused.done
      expect(refused.events).toHaveLength(1)
      expect(refused.events[0]?.data).toBeUndefined()
      expect(refused.events[0]?.errors?.[0]?.extensions).toEqual({ code: 'GRAPHQL_VALIDATION_FAILED' })
      expect(refused.events[0]?.errors?.[0]?.message).toMatch(
        /Query cost limit: this operation costs 61000 with the variables sent/,
      )
    } finally {
      await client.dispose()
    }
  })
})
