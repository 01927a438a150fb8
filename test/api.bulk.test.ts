/**
 * bulkRuns through the real server with its runner: dry run by default, an
 * empty filter refused, operator only; a bulk cancel of 5,000 runs while the
 * runner starts others (every selected run cancelled exactly once and named
 * in its log, none of the others touched, missed or run twice); audited once
 * with its bulkId; EventRun.bulkIds; PAUSE and RESUME.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import * as runsSql from '../sql/eventRuns/index.ts'
import { unique } from './helpers/fixtures.ts'
import { statusCounts, waitFor } from './helpers/runnerHarness.ts'
import { type Auth, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true })
})
afterAll(async () => {
  await s?.close()
})

const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'on air' } }] }] }
const CUE = { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'go?' } }] }] }

async function define(program: unknown): Promise<{ id: number; versionId: number }> {
  const res = await s.gql<{ createDefinition: { id: string; currentVersion: { id: string } } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id currentVersion { id } } }`,
    { variables: { input: { slug: unique('bulk'), title: 't', program } }, auth: 'admin' },
  )
  expect(res.body.errors).toBeUndefined()
  const d = res.body.data?.createDefinition
  return { id: Number(d?.id), versionId: Number(d?.currentVersion.id) }
}

/** `n` runs of a definition, a millisecond apart from `base`, in one scope each. */
async function makeRuns(def: { id: number; versionId: number }, n: number, base: number, prefix: string) {
  for (let i = 0; i < n; i += 2000) {
    await runsSql.materialiseMany(
      s.t.db,
      Array.from({ length: Math.min(2000, n - i) }, (_, k) => ({
        definitionId: def.id,
        versionId: def.versionId,
        scope: `${prefix}${i + k}`,
        scheduledFor: new Date(base + i + k),
        timezone: 'UTC',
        concurrencyKey: null,
        startedBy: 'test',
      })),
    )
  }
}

interface Bulk {
  bulkId: string | null
  matched: number
  applied: number
  dryRun: boolean
}

function bulk(vars: Record<string, unknown>, auth: Auth = 'operator') {
  return s.gql<{ bulkRuns: Bulk }>(
    `mutation ($action: BulkAction!, $filter: RunFilter!, $dryRun: Boolean, $reason: String) {
       bulkRuns(action: $action, filter: $filter, dryRun: $dryRun, reason: $reason) { bulkId matched applied dryRun } }`,
    { variables: vars, auth },
  )
}

it('refuses an empty filter and callers below operator; a dry run changes nothing', async () => {
  const refused = await bulk({ action: 'CANCEL', filter: {}, dryRun: false })
  expect(refused.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  expect(refused.body.errors?.[0]?.message).toContain('empty filter')
  const viewer = await bulk({ action: 'CANCEL', filter: { rehearsal: true } }, 'viewer')
  expect(viewer.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
  const def = await define(LOG_ONLY)
  await makeRuns(def, 20, Date.now() + 3600_000, 'dry')
  const dry = await bulk({ action: 'CANCEL', filter: { definitionId: String(def.id) } })
  expect(dry.body.data?.bulkRuns).toEqual({ bulkId: null, matched: 20, applied: 0, dryRun: true })
  expect(await statusCounts(s.t.db, def.id)).toEqual({ scheduled: 20 })
  // Statuses the action does not apply to are not counted: nothing of these is running.
  const pause = await bulk({ action: 'PAUSE', filter: { definitionId: String(def.id) } })
  expect(pause.body.data?.bulkRuns.matched).toBe(0)
})

it('cancels 5,000 runs while the runner starts others: each cancelled once, named in its log; the others untouched', async () => {
  const target = await define(LOG_ONLY)
  const other = await define(LOG_ONLY)
  const future = Date.now() + 3600_000
  await makeRuns(target, 5000, future, 't')
  // The others come due while the bulk action runs, in waves, so the runner is starting them throughout.
  const waves = (async () => {
    for (let w = 0; w < 6; w++) {
      await makeRuns(other, 50, Date.now() - 1000 + w, `o${w}-`)
      await new Promise((r) => setTimeout(r, 100))
    }
  })()
  const res = await bulk({
    action: 'CANCEL',
    filter: { definitionId: String(target.id), statuses: ['SCHEDULED'] },
    dryRun: false,
    reason: 'venue closed',
  })
  await waves
  expect(res.body.errors).toBeUndefined()
  const result = res.body.data?.bulkRuns as Bulk
  expect(result).toMatchObject({ matched: 5000, applied: 5000, dryRun: false })
  expect(result.bulkId).toMatch(/^\d+$/)
  expect(await statusCounts(s.t.db, target.id)).toEqual({ cancelled: 5000 })
  const named = await s.t.db.query<{ run_id: number; n: number }>(
    `SELECT l.run_id, COUNT(*) AS n FROM event_run_logs l JOIN event_runs r ON r.id = l.run_id
      WHERE r.definition_id = ? AND l.message LIKE ? GROUP BY l.run_id`,
    [target.id, `bulk cancel ${result.bulkId} by %venue closed`],
  )
  expect(named).toHaveLength(5000)
  expect(named.every((r) => Number(r.n) === 1)).toBe(true)
  const audit = await s.t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM audit_log WHERE action = 'bulkRuns' AND outcome = 'ok' AND target_id = ?`,
    [result.bulkId],
  )
  expect(Number(audit[0]?.n)).toBe(1)

  // Every other run started and completed once: none cancelled, none missed, none run twice.
  await waitFor(async () => (await statusCounts(s.t.db, other.id)).completed === 300, {
    timeoutMs: 30_000,
    what: 'the other 300 runs to complete',
  })
  expect(await statusCounts(s.t.db, other.id)).toEqual({ completed: 300 })
  const aired = await s.t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_run_logs l JOIN event_runs r ON r.id = l.run_id
      WHERE r.definition_id = ? AND l.message = 'on air'`,
    [other.id],
  )
  expect(Number(aired[0]?.n)).toBe(300)

  const again = await bulk({ action: 'CANCEL', filter: { definitionId: String(target.id) }, dryRun: false })
  expect(again.body.data?.bulkRuns).toMatchObject({ matched: 0, applied: 0 })
  const [one] = await s.t.db.query<{ id: number }>(
    'SELECT id FROM event_runs WHERE definition_id = ? LIMIT 1',
    [target.id],
  )
  const run = await s.gql<{ run: { bulkIds: string[]; status: string; lastError: string } }>(
    `query ($id: ID!) { run(id: $id) { bulkIds status lastError } }`,
    { variables: { id: String(one?.id) }, auth: 'viewer' },
  )
  expect(run.body.data?.run).toMatchObject({ bulkIds: [result.bulkId], status: 'CANCELLED' })
  expect(run.body.data?.run.lastError).toContain('venue closed')
})

it('pauses and resumes the running runs of a show', async () => {
  const def = await define(CUE)
  await makeRuns(def, 3, Date.now() - 1000, 'p')
  await waitFor(async () => (await statusCounts(s.t.db, def.id)).running === 3, {
    what: 'three running runs',
  })
  const paused = await bulk({ action: 'PAUSE', filter: { definitionId: String(def.id) }, dryRun: false })
  expect(paused.body.data?.bulkRuns).toMatchObject({ matched: 3, applied: 3 })
  expect(await statusCounts(s.t.db, def.id)).toEqual({ paused: 3 })
  const resumed = await bulk({ action: 'RESUME', filter: { definitionId: String(def.id) }, dryRun: false })
  expect(resumed.body.data?.bulkRuns).toMatchObject({ matched: 3, applied: 3 })
  await waitFor(async () => (await statusCounts(s.t.db, def.id)).running === 3, { what: 'running again' })
})
