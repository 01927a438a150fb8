/**
 * Drill: 10,000 generated GraphQL requests with hostile values against a real
 * server process.
 *
 * The server (`node --no-memory-reducer --import tsx src/cli.ts serve`, RUNNER=off so the fuzz
 * measures the API, on a throwaway database) is seeded with a few definitions,
 * runs and steps so ids sometimes hit real rows. Documents come from the schema
 * the server itself reports (introspection) via test/drills/fuzz.ts: every root
 * query and mutation, valid shapes, hostile values, inline or as variables,
 * sent over HTTP with an admin token, four at a time.
 *
 * Expected, for every request: an HTTP status below 500 (never a dropped
 * connection or a timeout), and no error that carries SQL (`SELECT `,
 * `INSERT `, `UPDATE `, ` WHERE `, `ER_`), a stack frame or a file path. No
 * answer is an unexpected error (INTERNAL_SERVER_ERROR): hostile input is the
 * caller's mistake and must be said so. Afterwards the process is still up and
 * /healthz and /readyz answer 200.
 *
 * DRILL_SEED=n replays a run; DRILL_FUZZ_CASES=n changes the count.
 */
import {
  buildClientSchema,
  type GraphQLSchema,
  getIntrospectionQuery,
  type IntrospectionQuery,
} from 'graphql'
import { afterAll, beforeAll, expect, it } from 'vitest'
import * as stepsSql from '../../sql/eventSteps/index.ts'
import { createTestDb, type TestDb } from '../helpers/db.ts'
import { stepSpecs } from '../helpers/fixtures.ts'
import { generateCase } from './fuzz.ts'
import { type Known, mulberry32 } from './fuzzValues.ts'
import {
  codesOf,
  type GqlAnswer,
  leaks,
  percentile,
  postGql,
  probe,
  report,
  type ServerProcess,
  SHOWRUNNER_TOKENS,
  spawnServer,
} from './lib.ts'

const CASES = Number(process.env.DRILL_FUZZ_CASES ?? 10_000)
const CONCURRENCY = 4
/** Hard bound on the whole loop, whatever happens. */
const MAX_LOOP_MS = 300_000
const MAX_BODY_BYTES = 1_048_576

let t: TestDb
let server: ServerProcess | null = null
let s: ServerProcess
let schema: GraphQLSchema
const known: Known = {
  definitionIds: [],
  runIds: [],
  stepIds: [],
  slugs: [],
  receiverUrl: 'http://127.0.0.1:9',
}

beforeAll(async () => {
  t = await createTestDb()
  server = await spawnServer({
    name: 'fuzz',
    env: {
      DATABASE_URL: t.url,
      SHOWRUNNER_TOKENS,
      RUNNER: 'off',
      LOG_LEVEL: 'error',
      MAX_BODY_BYTES: String(MAX_BODY_BYTES),
      WEBHOOK_ALLOW: 'http://127.0.0.1:9/',
    },
  })
  s = server

  // ── Seed rows the fuzz can hit ──────────────────────────────────────
  for (let d = 0; d < 3; d++) {
    const slug = `fuzz-seed-${d}`
    const def = await postGql<{ createDefinition: { id: string } }>(s.url, {
      query: 'mutation ($i: CreateDefinitionInput!) { createDefinition(input: $i) { id } }',
      variables: {
        i: {
          slug,
          title: `Seed ${d}`,
          schedule: d === 0 ? '0 18 * * 5' : null,
          timezone: 'Europe/London',
          concurrencyKey: d === 1 ? 'k:{{run.scope}}' : null,
          program: {
            phases: [
              {
                name: 'main',
                steps: [
                  { kind: 'core.log', params: { message: 'hi {{run.scope}}' } },
                  { kind: 'core.cue', params: { prompt: 'go?' } },
                ],
              },
              { name: 'end', ending: true, steps: [{ kind: 'core.wait', params: { seconds: 1 } }] },
            ],
          },
        },
      },
    })
    const defId = def.body?.data?.createDefinition.id
    expect(defId, JSON.stringify(def.body)).toBeTruthy()
    known.definitionIds.push(defId as string)
    known.slugs.push(slug)
    for (let r = 0; r < 4; r++) {
      const run = await postGql<{ startRun: { id: string } }>(s.url, {
        query: 'mutation ($d: ID!, $s: String) { startRun(definitionId: $d, scope: $s) { id } }',
        variables: { d: defId, s: `seed-${r}` },
      })
      const runId = run.body?.data?.startRun.id
      expect(runId, JSON.stringify(run.body)).toBeTruthy()
      known.runIds.push(runId as string)
      // The runner is off: give the run steps through the SQL layer, as starting would.
      await stepsSql.expand(t.db, [{ runId: Number(runId), specs: stepSpecs(3) }])
    }
  }
  const stepRows = await t.db.query<{ id: number }>('SELECT id FROM event_run_steps ORDER BY id')
  known.stepIds.push(...stepRows.map((r) => String(r.id)))

  // ── The schema, as the server reports it ────────────────────────────
  const intro = await postGql<IntrospectionQuery>(s.url, { query: getIntrospectionQuery() })
  expect(intro.status).toBe(200)
  schema = buildClientSchema(intro.body?.data as IntrospectionQuery)
}, 90_000)

afterAll(async () => {
  await server?.stop(5000)
  await t?.drop()
})

/**
 * The inputs this drill found failing with "Unexpected error." (each fixed),
 * replayed every time rather than left to the random draw.
 */
it("regressions: deep documents, deep or non-finite JSON, lone surrogates are the caller's mistake, not internal errors", async () => {
  const def = known.definitionIds[0] as string
  const step = known.stepIds[0] as string
  const post = (body: string) => postGql(s.url, body)
  const expectCode = (a: GqlAnswer, status: number, code: string) => {
    const what = JSON.stringify(a.body ?? a.text).slice(0, 300)
    expect(a.status, what).toBe(status)
    expect(codesOf(a).length, what).toBeGreaterThan(0)
    expect(new Set(codesOf(a)), what).toEqual(new Set([code]))
    expect(leaks(a)).toEqual([])
  }
  const startRun = (params: string, scope: string) =>
    `{"query":"mutation ($p: JSON) { startRun(definitionId: \\"${def}\\", scope: \\"${scope}\\", params: $p) { id params } }","variables":{"p":${params}}}`
  const nested = (d: number) => `{"a":${'['.repeat(d - 1)}${']'.repeat(d - 1)}}`

  // graphql-js recursion: a literal or a selection nested thousands deep (was: stack overflow).
  const deepLiteral = `mutation { startRun(definitionId: "${def}", params: {a: ${'['.repeat(10_000)}${']'.repeat(10_000)}}) { id } }`
  expectCode(await post(JSON.stringify({ query: deepLiteral })), 400, 'GRAPHQL_PARSE_FAILED')
  const deepSelection = `{ runs ${'{ steps { run '.repeat(2500)}{ id }${' } }'.repeat(2500)} }`
  expectCode(await post(JSON.stringify({ query: deepSelection })), 400, 'GRAPHQL_PARSE_FAILED')
  // …while a legitimately nested document (depth limit 10) still parses and validates as before.
  // (Its answer could also be too large, and says so beside the depth: every limit it breaks is named.)
  const tooDeep = `{ runs ${'{ steps { run '.repeat(6)}{ id }${' } }'.repeat(6)} }`
  const deep = await post(JSON.stringify({ query: tooDeep }))
  expect(deep.status).toBe(400)
  expect(codesOf(deep)).toContain('GRAPHQL_VALIDATION_FAILED')
  expect(new Set(codesOf(deep))).toEqual(
    new Set(['GRAPHQL_VALIDATION_FAILED', 'ANSWER_TOO_LARGE'].filter((c) => codesOf(deep).includes(c))),
  )
  expect(leaks(deep)).toEqual([])

  // JSON values MariaDB cannot store (JSON_VALID stops at 31 levels) or Node cannot stringify.
  for (const depth of [25, 32, 50_000])
    expectCode(await post(startRun(nested(depth), `deep-${depth}`)), 400, 'BAD_USER_INPUT')
  const ok = await post(startRun(nested(24), 'deep-24'))
  expect(codesOf(ok), JSON.stringify(ok.body)).toEqual([])
  const deepProgram = {
    phases: [
      { name: 'p', steps: [{ kind: 'core.log', params: { message: 'm', extra: JSON.parse(nested(30)) } }] },
    ],
  }
  expectCode(
    await postGql(s.url, {
      query: 'mutation ($p: JSON!) { publishVersion(definitionId: "' + def + '", program: $p) { id } }',
      variables: { p: deepProgram },
    }),
    400,
    'BAD_USER_INPUT',
  )
  // 1e309 parses to Infinity, which JSON.stringify would have stored as null.
  expectCode(await post(startRun('{"n":1e309}', 'inf')), 400, 'BAD_USER_INPUT')

  // Lone surrogates: legal in GraphQL strings, refused by JSON_VALID (was: the mutation failed after applying).
  const lone = '\udfff\ud800'
  const run = await postGql<{ startRun: { id: string; params: { note: string } } }>(s.url, {
    query: `mutation ($p: JSON, $s: String) { startRun(definitionId: "${def}", scope: $s, params: $p) { id params } }`,
    variables: { p: { note: lone, [lone]: 1 }, s: `surrogate-${lone}` },
  })
  expect(codesOf(run), JSON.stringify(run.body)).toEqual([])
  expect(run.body?.data?.startRun.params.note).toBe('\ufffd\ufffd')
  for (const field of ['resolveCue(stepId: $id, note: $t)', 'skipStep(stepId: $id, reason: $t)']) {
    const a = await postGql(s.url, {
      query: `mutation ($id: ID!, $t: String) { ${field} { applied } }`,
      variables: { id: step, t: lone },
    })
    expect(codesOf(a), JSON.stringify(a.body)).toEqual([])
  }
  expect(s.alive()).toBe(true)
}, 60_000)

it(`${CASES} generated documents with hostile values: no 5xx, no crash, no SQL or stack in any error`, async () => {
  // ── The fuzz ────────────────────────────────────────────────────────
  const seed = Number(process.env.DRILL_SEED ?? Math.floor(Math.random() * 2 ** 31))
  const rng = mulberry32(seed)
  let bytes = 0

  const statuses: Record<string, number> = {}
  const codes: Record<string, number> = {}
  const labels: Record<string, number> = {}
  const serverErrors: string[] = []
  const transportFailures: string[] = []
  const leaked: string[] = []
  const internal: string[] = []
  const latencies: number[] = []
  const slowest: { ms: number; label: string }[] = []
  let sent = 0
  let clean = 0
  let next = 0
  let dead = false
  const started = Date.now()
  const deadline = started + MAX_LOOP_MS

  // Generated one at a time (bodies reach a megabyte; 10,000 at once would not fit),
  // in index order, so a seed replays the same sequence.
  const one = async (i: number) => {
    const c = generateCase(rng, schema, known, MAX_BODY_BYTES)
    bytes += c.body.length
    const a: GqlAnswer = await postGql(s.url, c.body, { timeoutMs: 30_000 })
    sent++
    latencies.push(a.ms)
    slowest.push({ ms: a.ms, label: c.label })
    if (slowest.length > 20) {
      slowest.sort((x, y) => y.ms - x.ms)
      slowest.length = 10
    }
    statuses[a.status] = (statuses[a.status] ?? 0) + 1
    const kind = c.label.startsWith('envelope') ? c.label : (c.label.split('+')[0] as string)
    labels[kind] = (labels[kind] ?? 0) + 1
    for (const code of new Set(codesOf(a))) codes[code] = (codes[code] ?? 0) + 1
    if (a.status === 200 && codesOf(a).length === 0) clean++
    const where = `#${i} ${c.label} → ${a.status}`
    if (a.status === 0) transportFailures.push(`${where}: ${a.text}`)
    else if (a.status >= 500) serverErrors.push(`${where}: ${JSON.stringify(a.body ?? a.text).slice(0, 300)}`)
    for (const l of leaks(a)) leaked.push(`${where}: ${l}`)
    if (codesOf(a).includes('INTERNAL_SERVER_ERROR'))
      internal.push(
        `${where}: ${c.body.slice(0, 240)}${c.body.length > 240 ? `… (${c.body.length} bytes)` : ''}`,
      )
  }

  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < CASES && !dead && Date.now() < deadline) {
        const i = next++
        await one(i)
        if (i % 500 === 0 && !s.alive()) dead = true
      }
    }),
  )
  const elapsed = Date.now() - started

  // ── Afterwards ──────────────────────────────────────────────────────
  const healthz = await probe(s.url, '/healthz')
  const readyz = await probe(s.url, '/readyz')
  const sanity = await postGql<{ health: { database: boolean } }>(s.url, { query: '{ health { database } }' })
  slowest.sort((x, y) => y.ms - x.ms)
  const figures = {
    seed,
    cases: CASES,
    sent,
    elapsedMs: elapsed,
    requestsPerS: Math.round((sent / elapsed) * 1000),
    megabytesSent: Math.round(bytes / 1e5) / 10,
    statuses,
    codes,
    latencyMs: {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: Math.max(0, ...latencies),
    },
    slowest: slowest.slice(0, 5),
    rootFieldsHit: Object.keys(labels).filter((l) => !l.startsWith('envelope')).length,
    envelopeCases: Object.entries(labels)
      .filter(([l]) => l.startsWith('envelope'))
      .reduce((n, [, c]) => n + c, 0),
    answersWithoutErrors: clean,
    serverErrors: serverErrors.length,
    transportFailures: transportFailures.length,
    leaks: leaked.length,
    internalErrors: internal.length,
    serverErrorLogLines: s.errorLines().length,
    aliveAfter: s.alive(),
    healthzAfter: healthz,
    readyzAfter: readyz,
  }
  report('fuzz', figures)
  for (const line of [...serverErrors, ...transportFailures, ...leaked, ...internal].slice(0, 15))
    console.log(`[drill:fuzz] ${line}`)
  for (const line of s.errorLines().slice(0, 8)) console.log(`[drill:fuzz] server log: ${line.slice(0, 600)}`)

  // ── Verdicts ────────────────────────────────────────────────────────
  expect(s.alive(), s.tail()).toBe(true)
  expect(sent, `only ${sent} of ${CASES} sent within ${MAX_LOOP_MS} ms`).toBe(CASES)
  expect(serverErrors).toEqual([])
  expect(transportFailures).toEqual([])
  expect(leaked).toEqual([])
  expect(internal).toEqual([])
  expect(healthz).toBe(200)
  expect(readyz).toBe(200)
  expect(sanity.body?.data?.health.database).toBe(true)
}, 360_000)
