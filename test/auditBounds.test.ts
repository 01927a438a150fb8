/**
 * The audit log is bounded: rows older than AUDIT_RETENTION_DAYS are swept by
 * the runner's housekeeping like old runs (0 keeps them), and refusals are
 * sampled: 200 refused viewer mutations and 200 refused authentications in a
 * minute write at most 10 audit rows and 10 warn lines each, the next one
 * recorded saying how many were left out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as audit from '../sql/auditLog.ts'
import { createLogger } from '../src/log.ts'
import { RefusalSampler } from '../src/refusalSampler.ts'
import { Runner } from '../src/runner/runner.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { captureLog } from './helpers/logCapture.ts'
import { makeRegistry, TestClock } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const DAY = 86_400_000

describe('RefusalSampler', () => {
  it('records 10 per key per minute, counts the rest, and reports the count with the next one recorded', () => {
    let now = 0
    const sampler = new RefusalSampler(10, 60_000, () => now)
    const taken = Array.from({ length: 25 }, () => sampler.take('k'))
    expect(taken.filter((x) => x !== null)).toEqual(Array(10).fill(0))
    expect(sampler.take('other')).toBe(0)
    now = 60_000
    expect(sampler.take('k')).toBe(15)
    expect(sampler.take('k')).toBe(0)
  })
})

describe('audit retention', () => {
  let t: TestDb
  beforeAll(async () => {
    t = await createTestDb()
  })
  afterAll(async () => {
    await t.drop()
  })

  async function seed(daysAgo: number, n: number) {
    for (let i = 0; i < n; i++) {
      await audit.record(t.db, {
        actor: 'admin#x',
        action: 'test',
        targetType: 'api',
        targetId: null,
        outcome: 'ok',
      })
    }
    await t.db.execute(`UPDATE audit_log SET at = NOW(3) - INTERVAL ? DAY WHERE action = 'test'`, [daysAgo])
    await t.db.execute(`UPDATE audit_log SET action = ? WHERE action = 'test'`, [`aged-${daysAgo}`])
  }
  const count = async (action: string) =>
    Number(
      (await t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM audit_log WHERE action = ?', [action]))[0]
        ?.n,
    )

  it('deletes rows older than the retention period at the housekeeping pass, keeps the rest; 0 keeps all', async () => {
    await seed(120, 30)
    await seed(10, 5)
    const keepAll = new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(new Date()),
      instanceId: 'a0',
      auditRetentionMs: 0,
    })
    await keepAll.tick()
    expect(await count('aged-120')).toBe(30)
    const runner = new Runner({
      db: t.db,
      registry: makeRegistry(),
      clock: new TestClock(new Date()),
      instanceId: 'a90',
      auditRetentionMs: 90 * DAY,
    })
    await runner.tick()
    expect(await count('aged-120')).toBe(0)
    expect(await count('aged-10')).toBe(5)
  })
})

describe('refusals are sampled', () => {
  let s: TestServer
  const log = captureLog()
  beforeAll(async () => {
    s = await startTestServer({ deps: { logger: createLogger({ level: 'info', destination: log.stream }) } })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('200 refused viewer mutations write at most 10 audit rows and 10 warn lines', async () => {
    const before = Number((await s.t.db.query<{ n: number }>('SELECT COUNT(*) AS n FROM audit_log'))[0]?.n)
    for (let i = 0; i < 200; i++) {
      const res = await s.gql('mutation { startRun(definitionId: "1") { id } }', { auth: 'viewer' })
      expect(res.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    }
    await new Promise((r) => setTimeout(r, 100))
    const rows = await s.t.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM audit_log WHERE outcome = 'refused'`,
    )
    expect(Number(rows[0]?.n)).toBeLessThanOrEqual(10)
    expect(Number(rows[0]?.n)).toBeGreaterThan(0)
    expect(before).toBe(0)
    expect(log.lines.filter((l) => l.msg === 'refused authorisation').length).toBeLessThanOrEqual(10)
  })

  it('200 refused authentications write at most 10 warn lines', async () => {
    for (let i = 0; i < 200; i++) {
      const res = await s.gql('{ health { ok } }', { auth: { raw: `not-a-token-${i}` } })
      expect(res.status).toBe(401)
    }
    const lines = log.lines.filter((l) => l.msg === 'refused authentication')
    expect(lines.length).toBeLessThanOrEqual(10)
    expect(lines.length).toBeGreaterThan(0)
    expect(JSON.stringify(lines)).not.toContain('not-a-token')
  })
})
