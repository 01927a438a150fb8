/**
 * No N+1: nested fields over a long list cost a fixed number of statements,
 * whatever the list's length (per-request DataLoaders, counted with the pool's
 * statement counter).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { makeDefinition, newRun, stepSpecs } from './helpers/fixtures.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
const RUNS = 500

beforeAll(async () => {
  // 500 runs with their steps weigh 500 × 1,000 steps under the query budget and
  // the answer estimate; this file measures statements, not those bounds
  // (test/api.queryBudget.test.ts, test/api.answerSize.test.ts).
  s = await startTestServer({
    env: { MAX_QUERY_COST: '10000000', MAX_ANSWER_BYTES: String(512 * 1024 * 1024) },
  })
  const db = s.t.db
  // Five definitions (two versions each, runs on both) so definitions and versions really batch.
  const rows = []
  for (let d = 0; d < 5; d++) {
    const fx = await makeDefinition(db, { concurrencyKey: `key-${d}` })
    for (let i = 0; i < RUNS / 5; i++)
      rows.push(newRun(fx, { scheduledFor: new Date(Date.UTC(2030, 0, 1, 0, d, i)) }))
  }
  await runs.materialiseMany(db, rows)
  const all = await listRuns(db, { limit: 500 })
  expect(all).toHaveLength(RUNS)
  await steps.expand(
    db,
    all.map((r) => ({ runId: r.id, specs: stepSpecs(3) })),
  )
  await logs.appendMany(
    db,
    all.flatMap((r) => [
      { runId: r.id, message: 'one' },
      { runId: r.id, message: 'two' },
      { runId: r.id, message: 'three' },
    ]),
  )
  // One holder per key, so concurrencyHolder resolves to a run for most rows.
  const firstOfEach = new Map<number, number>()
  for (const r of all) if (!firstOfEach.has(r.definitionId)) firstOfEach.set(r.definitionId, r.id)
  for (const id of firstOfEach.values()) {
    // Holding a key is the lock row plus a key-holding status, as claimStart leaves it.
    await db.run(
      'INSERT INTO concurrency_locks (lock_key, run_id) SELECT concurrency_key, id FROM event_runs WHERE id = ?',
      [id],
    )
    await runs.transition(db, id, 'scheduled', 'running')
  }
})
afterAll(async () => {
  await s?.close()
})

async function statementsFor(
  query: string,
  variables?: Record<string, unknown>,
): Promise<{ statements: number; body: unknown }> {
  const before = s.app.db.stats.statements
  const r = await s.gql(query, { auth: 'viewer', variables })
  expect(r.body.errors).toBeUndefined()
  return { statements: s.app.db.stats.statements - before, body: r.body.data }
}

describe('DataLoaders', () => {
  it('runs(limit: 500) with definition, version, steps and waitingSteps costs a few statements, the same as limit 50', async () => {
    const q = (limit: number) =>
      `{ runs(limit: ${limit}) { definition { title } version { version } steps { id } waitingSteps } }`
    const big = await statementsFor(q(500))
    const small = await statementsFor(q(50))
    const data = big.body as { runs: { steps: unknown[]; definition: { title: string } }[] }
    expect(data.runs).toHaveLength(500)
    expect(data.runs.every((r) => r.steps.length === 3 && r.definition.title === 'Fixture event')).toBe(true)
    // runs + definitions + versions + steps
    expect(big.statements).toBeLessThanOrEqual(6)
    expect(small.statements).toBe(big.statements)
  })

  it('stays bounded with logs, concurrency holders, each step’s run and definitions’ versions', async () => {
    const q = (limit: number) => `{
      runs(limit: ${limit}) {
        id logs(limit: 2) { message } concurrencyHolder { id status }
        steps { run { id } }
        definition { versions { version } currentVersion { id } }
      }
    }`
    const big = await statementsFor(q(500))
    const small = await statementsFor(q(50))
    const data = big.body as {
      runs: { logs: { message: string }[]; concurrencyHolder: { id: string } | null }[]
    }
    expect(data.runs.every((r) => r.logs.length === 2 && r.logs[0]?.message === 'three')).toBe(true)
    expect(data.runs.filter((r) => r.concurrencyHolder !== null).length).toBeGreaterThan(400)
    // runs, logs, holders, steps, definitions, versions, current versions, holders' runs (when not in the list)
    expect(big.statements).toBeLessThanOrEqual(10)
    expect(small.statements).toBeLessThanOrEqual(10)
  })

  it('a run list reads its definitions and versions up front only when they are selected, fragments included', async () => {
    // the page's keys + its runs by key + waiting counts = 3; + 1 per selected parent kind.
    const cases: [string, number][] = [
      ['{ runs(limit: 500) { id } }', 3],
      ['{ runs(limit: 500) { id definition { id } } }', 4],
      ['{ runs(limit: 500) { ... on EventRun { version { id } } } }', 4],
      [
        '{ runs(limit: 500) { ...R } } fragment R on EventRun { definition { slug } ...V } fragment V on EventRun { version { version } }',
        5,
      ],
    ]
    for (const [query, expected] of cases) {
      const { statements } = await statementsFor(query)
      expect(statements, query).toBe(expected)
    }
    // @skip/@include are applied as execution applies them, variables included.
    const directiveCases: [string, Record<string, unknown>, number][] = [
      ['{ runs(limit: 500) { id definition @skip(if: true) { id } } }', {}, 3],
      ['query($d: Boolean!) { runs(limit: 500) { id definition @include(if: $d) { id } } }', { d: false }, 3],
      ['query($d: Boolean!) { runs(limit: 500) { id definition @include(if: $d) { id } } }', { d: true }, 4],
      [
        'query($s: Boolean!) { runs(limit: 500) { id ... @skip(if: $s) { version { id } } } }',
        { s: true },
        3,
      ],
      [
        'query($s: Boolean!) { runs(limit: 500) { id ...V @skip(if: $s) } } fragment V on EventRun { version { id } }',
        { s: false },
        4,
      ],
    ]
    for (const [query, variables, expected] of directiveCases) {
      const { statements } = await statementsFor(query, variables)
      expect(statements, `${query} ${JSON.stringify(variables)}`).toBe(expected)
    }
    // …and each run still gets its own parents.
    const { body } = await statementsFor('{ runs(limit: 500) { id definition { id } version { id } } }')
    const list = (body as { runs: { id: string; definition: { id: string }; version: { id: string } }[] })
      .runs
    const truth = new Map((await listRuns(s.t.db, { limit: 500 })).map((r) => [String(r.id), r]))
    expect(list).toHaveLength(500)
    for (const r of list) {
      expect(r.definition.id).toBe(String(truth.get(r.id)?.definitionId))
      expect(r.version.id).toBe(String(truth.get(r.id)?.versionId))
    }
    expect(new Set(list.map((r) => r.version.id)).size).toBe(5)
  })

  it('waitingSteps with their runs is bounded too', async () => {
    const { statements } = await statementsFor(
      '{ waitingSteps(limit: 500) { id run { id definition { slug } } } }',
    )
    expect(statements).toBeLessThanOrEqual(3)
  })
})
