/**
 * Runs created per principal per minute (MAX_RUNS_PER_MINUTE): startRun,
 * backfillRuns and retryRun take from one count per principal, kept in the database, so a
 * second instance on the same database sees the same count. Past it the
 * mutation answers RATE_LIMITED with extensions.retryAfterSeconds and an HTTP
 * Retry-After header, and creates nothing; another principal is not affected.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'
import { sleep } from './helpers/runnerHarness.ts'
import {
  SESSION_PROGRAM,
  SHOWRUNNER_TOKENS,
  startTestServer,
  type TestServer,
  TOKENS,
} from './helpers/server.ts'

const MAX = 6
let s: TestServer
let other: App
let otherUrl: string
let definitionId: string

beforeAll(async () => {
  s = await startTestServer({ env: { MAX_RUNS_PER_MINUTE: String(MAX) } })
  other = buildApp(
    loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: s.t.url,
      SHOWRUNNER_TOKENS,
      RUNNER: 'off',
      LOG_LEVEL: 'silent',
      MAX_RUNS_PER_MINUTE: String(MAX),
    }),
    { logger: silentLogger() },
  )
  otherUrl = (await other.start()).url
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($p: JSON!) { createDefinition(input: { slug: "quota", title: "Q", schedule: "* * * * *", program: $p }) { id } }`,
    { variables: { p: SESSION_PROGRAM } },
  )
  expect(res.body.errors).toBeUndefined()
  definitionId = res.body.data!.createDefinition.id
})
afterAll(async () => {
  await other?.stop()
  await s?.close()
})

async function post(base: string, token: string, query: string, variables: Record<string, unknown>) {
  const res = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  })
  const body = (await res.json()) as {
    data?: unknown
    errors?: { message: string; extensions?: Record<string, unknown> }[]
  }
  return { status: res.status, headers: res.headers, body }
}

const START = 'mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }'
const BACKFILL = `mutation ($d: ID!, $from: DateTime!, $to: DateTime!) {
  backfillRuns(definitionId: $d, from: $from, to: $to) { created } }`

/** A count of nothing for every principal, well inside one clock minute. */
async function freshCounts(): Promise<void> {
  if (new Date().getSeconds() > 50) await sleep((61 - new Date().getSeconds()) * 1000)
  await s.t.db.execute('DELETE FROM run_quotas')
}

async function runCount(): Promise<number> {
  const [row] = await s.t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM event_runs')
  return Number(row?.n)
}

describe('runs per principal per minute', () => {
  it('counts startRun and backfillRuns together, across instances, and refuses past the quota with when to retry', async () => {
    // Stay inside one clock minute: the window is the minute.
    if (new Date().getSeconds() > 45) await sleep((61 - new Date().getSeconds()) * 1000)
    const at = (i: number) => new Date(Date.UTC(2030, 0, 1, 0, i)).toISOString()
    // 2 through this instance, 2 through the other, a backfill of 2 through this one: 6.
    for (const [base, i] of [
      [s.url, 0],
      [s.url, 1],
      [otherUrl, 2],
      [otherUrl, 3],
    ] as const) {
      const ok = await post(base, TOKENS.operator, START, { d: definitionId, at: at(i) })
      expect(ok.body.errors).toBeUndefined()
    }
    const backfilled = await post(s.url, TOKENS.operator, BACKFILL, {
      d: definitionId,
      from: '2031-01-01T00:00:00Z',
      to: '2031-01-01T00:02:00Z',
    })
    expect(backfilled.body.errors).toBeUndefined()
    expect(backfilled.body.data).toEqual({ backfillRuns: { created: 2 } })
    const made = await runCount()

    for (const base of [s.url, otherUrl]) {
      const refused = await post(base, TOKENS.operator, START, { d: definitionId, at: at(9) })
      const error = refused.body.errors?.[0]
      expect(error?.extensions?.code).toBe('RATE_LIMITED')
      expect(error?.message).toMatch(
        /at most 6 runs may be created per principal per minute \(MAX_RUNS_PER_MINUTE\)/,
      )
      const retry = error?.extensions?.retryAfterSeconds as number
      expect(retry).toBeGreaterThanOrEqual(1)
      expect(retry).toBeLessThanOrEqual(60)
      expect(refused.headers.get('retry-after')).toBe(String(retry))
    }
    const refusedBackfill = await post(otherUrl, TOKENS.operator, BACKFILL, {
      d: definitionId,
      from: '2032-01-01T00:00:00Z',
      to: '2032-01-01T00:01:00Z',
    })
    expect(refusedBackfill.body.errors?.[0]?.extensions?.code).toBe('RATE_LIMITED')
    // retryRun creates a run too.
    const [failed] = await s.t.db.query<{ id: number }>('SELECT id FROM event_runs ORDER BY id LIMIT 1')
    await s.t.db.execute(`UPDATE event_runs SET status = 'failed', ended_at = NOW(3) WHERE id = ?`, [
      failed!.id,
    ])
    const refusedRetry = await post(
      s.url,
      TOKENS.operator,
      'mutation ($id: ID!) { retryRun(id: $id) { id } }',
      {
        id: String(failed!.id),
      },
    )
    expect(refusedRetry.body.errors?.[0]?.extensions?.code).toBe('RATE_LIMITED')
    expect(await runCount()).toBe(made)

    // Another principal has its own count.
    const admin = await post(s.url, TOKENS.admin, START, { d: definitionId, at: at(10) })
    expect(admin.body.errors).toBeUndefined()
  })

  it('a retry refused after its checks takes nothing from the count; one that creates its run takes one', async () => {
    const made = await s.gql<{ createDefinition: { id: string } }>(
      `mutation ($p: JSON!) { createDefinition(input: { slug: "quota-retry", title: "R", program: $p }) { id } }`,
      { variables: { p: SESSION_PROGRAM } },
    )
    expect(made.body.errors).toBeUndefined()
    await freshCounts()
    const started = await post(s.url, TOKENS.operator, START, {
      d: made.body.data!.createDefinition.id,
      at: '2034-01-01T00:00:00Z',
    })
    expect(started.body.errors).toBeUndefined()
    const runId = (started.body.data as { startRun: { id: string } }).startRun.id
    await s.t.db.execute(`UPDATE event_runs SET status = 'failed', ended_at = NOW(3) WHERE id = ?`, [runId])
    const taken = async () => {
      const [row] = await s.t.db.query<{ n: number | null }>('SELECT SUM(runs) AS n FROM run_quotas')
      return Number(row?.n ?? 0)
    }
    const RETRY = 'mutation ($id: ID!) { retryRun(id: $id) { id } }'
    await s.t.db.execute('DELETE FROM run_quotas')

    // Archived between the retry's first reads and its transaction: refused there, nothing taken.
    await s.t.db.execute(`UPDATE event_definitions SET state = 'archived' WHERE slug = 'quota-retry'`)
    const refused = await post(s.url, TOKENS.operator, RETRY, { id: runId })
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
    expect(await taken()).toBe(0)

    await s.t.db.execute(`UPDATE event_definitions SET state = 'active' WHERE slug = 'quota-retry'`)
    const retried = await post(s.url, TOKENS.operator, RETRY, { id: runId })
    expect(retried.body.errors).toBeUndefined()
    expect(await taken()).toBe(1)
  })

  it('racing creators on two instances never pass the quota together', async () => {
    await freshCounts()
    const before = await runCount()
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        post(i % 2 === 0 ? s.url : otherUrl, TOKENS.operator, START, {
          d: definitionId,
          at: new Date(Date.UTC(2033, 0, 1, 0, i)).toISOString(),
        }),
      ),
    )
    const ok = answers.filter((a) => !a.body.errors)
    const limited = answers.filter((a) => a.body.errors?.[0]?.extensions?.code === 'RATE_LIMITED')
    expect(ok.length).toBe(MAX)
    expect(limited.length).toBe(20 - MAX)
    expect((await runCount()) - before).toBe(MAX)
  })
})
