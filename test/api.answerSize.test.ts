/**
 * What an answer may weigh: a run's steps count at the program limit, large
 * fields at their bound, and no answer passes MAX_ANSWER_BYTES: refused with
 * ANSWER_TOO_LARGE before a statement runs when the document says so, and
 * before serialisation when only the data does. Run `params` are bounded by
 * MAX_PARAMS_BYTES. The issue's two routes to ending the process (steps of
 * 500 runs, thrice aliased; 30 aliases of 100 runs' megabyte params) are sent
 * six at once and leave the process up with its memory bounded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type GqlResponse,
  SESSION_PROGRAM,
  startTestServer,
  type TestServer,
  wsClient,
  wsSubscribe,
} from './helpers/server.ts'

let s: TestServer
let definitionId: string
const MB = 1024 * 1024

beforeAll(async () => {
  s = await startTestServer({ env: { MAX_BODY_BYTES: String(2 * MB) } })
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($p: JSON!) { createDefinition(input: { slug: "heavy", title: "H", schedule: "* * * * *", program: $p }) { id } }`,
    { variables: { p: SESSION_PROGRAM } },
  )
  expect(res.body.errors).toBeUndefined()
  definitionId = res.body.data!.createDefinition.id
  const backfill = await s.gql(
    `mutation ($d: ID!) { backfillRuns(definitionId: $d, from: "2026-01-01T00:00:00Z", to: "2026-01-01T01:40:00Z") { created } }`,
    { variables: { d: definitionId }, auth: 'operator' },
  )
  expect(backfill.body.errors).toBeUndefined()
  // Rows as a server before MAX_PARAMS_BYTES could store them: a megabyte of params each.
  await s.t.db.execute(`UPDATE event_runs SET params = JSON_OBJECT('pad', REPEAT('x', ?))`, [MB])
})
afterAll(async () => {
  await s?.close()
})

async function timed(query: string, variables?: Record<string, unknown>) {
  const before = s.app.db.stats.statements
  const res = await s.gql(query, { auth: 'viewer', variables })
  return { ...res, statements: s.app.db.stats.statements - before }
}

const aliased = (n: number, field: string) =>
  `{ ${Array.from({ length: n }, (_, i) => `a${i}: ${field}`).join(' ')} }`
const STEPS_OF_500 = () =>
  aliased(3, `runs(definitionId: ${definitionId}, limit: 500) { steps { id kind status params } }`)
const PARAMS_30X100 = aliased(30, 'runs(limit: 100) { params }')

function codes(res: GqlResponse): unknown[] {
  return (res.body.errors ?? []).map((e) => e.extensions?.code)
}

describe('the cost model weighs what an answer can really hold', () => {
  it("the steps of 500 runs, aliased thrice (the issue's 409 MB answer), are refused before any statement", async () => {
    const res = await timed(STEPS_OF_500())
    expect(res.status).toBe(400)
    expect(res.body.data).toBeUndefined()
    expect(res.statements).toBe(0)
    expect(res.body.errors?.map((e) => e.message).join('\n')).toMatch(
      /Query cost limit: this operation costs 1501500/,
    )
    expect(codes(res)).toContain('ANSWER_TOO_LARGE')
  })

  it('30 aliases of 100 runs with their params weigh 30 × 100 × MAX_PARAMS_BYTES: refused, naming MAX_ANSWER_BYTES', async () => {
    const res = await timed(PARAMS_30X100)
    expect(res.status).toBe(400)
    expect(res.statements).toBe(0)
    expect(codes(res)).toEqual(['ANSWER_TOO_LARGE'])
    expect(res.body.errors?.[0]?.message).toMatch(
      /^Answer size limit: this operation could answer about 18\d\.\d MB; at most 16\.0 MB \(MAX_ANSWER_BYTES\)/,
    )
    expect(JSON.stringify(res.body)).not.toContain('"http"')
  })

  it('sizes given as variables count at the value sent', async () => {
    const q = 'query ($n: Int) { runs(limit: $n) { params } }'
    const res = await timed(q, { n: 500 })
    expect(res.status).toBe(400)
    expect(codes(res)).toEqual(['ANSWER_TOO_LARGE'])
    expect(res.body.errors?.[0]?.message).toMatch(/with the variables sent; at most 16\.0 MB/)
    expect(res.statements).toBe(0)
  })
})

describe('the hard cap, measured before serialisation', () => {
  it('an answer the estimate passes but the data makes larger than 16 MB is refused, with no data', async () => {
    // 20 runs × 64 KB is within the estimate; these rows hold a megabyte each.
    const res = await timed('{ runs(limit: 20) { id params } }')
    expect(codes(res), JSON.stringify(res.body).slice(0, 300)).toEqual(['ANSWER_TOO_LARGE'])
    expect(res.body.data ?? null).toBeNull()
    expect(res.body.errors?.[0]?.message).toMatch(/over 16\.0 MB \(MAX_ANSWER_BYTES\) and was not sent/)
    // Within the cap it answers.
    const small = await timed('{ runs(limit: 10) { id params } }')
    expect(small.body.errors).toBeUndefined()
    expect((small.body.data as { runs: unknown[] }).runs).toHaveLength(10)
  })

  it('the same over graphql-ws', async () => {
    const client = wsClient(s, 'viewer')
    try {
      const sub = wsSubscribe(client, '{ runs(limit: 20) { id params } }')
      await sub.done
      expect(sub.events).toHaveLength(1)
      expect(sub.events[0]?.data ?? null).toBeNull()
      expect(sub.events[0]?.errors?.[0]?.extensions).toEqual({ code: 'ANSWER_TOO_LARGE' })
    } finally {
      await client.dispose()
    }
  })

  it('six heavy viewer requests at once leave the process up, its memory bounded, /healthz answering', async () => {
    const rssBefore = process.memoryUsage().rss
    let peak = rssBefore
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss)
    }, 5)
    const heavy = [STEPS_OF_500(), PARAMS_30X100, '{ runs(limit: 20) { id params } }']
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => s.gql(heavy[i % heavy.length]!, { auth: 'viewer' })),
    )
    const t0 = performance.now()
    const health = await fetch(`${s.url}/healthz`)
    const healthMs = performance.now() - t0
    clearInterval(sampler)
    for (const res of answers) expect(codes(res)).toContain('ANSWER_TOO_LARGE')
    expect(health.status).toBe(200)
    expect(healthMs).toBeLessThan(1000)
    // Two of the six hold 20 MB of rows each before the cap refuses them.
    expect(peak - rssBefore).toBeLessThan(400 * MB)
  })
})

describe('params are bounded (MAX_PARAMS_BYTES, 64 KB by default)', () => {
  const start = (params: unknown) =>
    s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!, $p: JSON) { startRun(definitionId: $d, params: $p) { id } }',
      { variables: { d: definitionId, p: params }, auth: 'operator' },
    )

  it('64 KB passes; one byte more is BAD_USER_INPUT naming the setting', async () => {
    const wrapper = Buffer.byteLength(JSON.stringify({ pad: '' }))
    const ok = await start({ pad: 'x'.repeat(64 * 1024 - wrapper) })
    expect(ok.body.errors).toBeUndefined()
    const over = await start({ pad: 'x'.repeat(64 * 1024 - wrapper + 1) })
    expect(over.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(over.body.errors?.[0]?.message).toMatch(
      /params is 65537 bytes of JSON; at most 65536 \(MAX_PARAMS_BYTES\)/,
    )
  })

  it('counts bytes, not characters', async () => {
    const over = await start({ pad: 'é'.repeat(40 * 1024) })
    expect(over.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  })
})
