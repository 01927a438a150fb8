/**
 * The list reads that run on every page view or every tick never sort rows
 * carrying JSON through a temporary table. MariaDB puts such a table on disk
 * (Aria), per statement; under concurrent load that path failed requests with
 * "Error on delete of '/tmp/#sql-temptable…'" and once crashed MariaDB 10.11.
 * Measured with the session's own `Created_tmp_disk_tables` on one connection.
 * With the same large log rows: a multi-row log INSERT stays within the
 * server's packet limit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import { listRuns } from '../sql/runPage.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { makeDefinition, newRun } from './helpers/fixtures.ts'

const RUNS = 300
const LINES = 5
let t: TestDb
/** One connection, so session status counts this file's statements only. */
let one: Db
let runIds: number[]

beforeAll(async () => {
  t = await createTestDb()
  one = t.open({ connectionLimit: 1 })
  const fx = await makeDefinition(t.db, { graceSeconds: 60 })
  const base = Date.UTC(2020, 0, 1)
  await runs.materialiseMany(
    t.db,
    Array.from({ length: RUNS }, (_, i) =>
      newRun(fx, { scheduledFor: new Date(base + i * 1000), params: { pad: 'x'.repeat(300) } }),
    ),
  )
  runIds = (await listRuns(t.db, { limit: 500 })).map((r) => r.id)
  for (let k = 0; k < LINES; k++)
    await logs.appendMany(
      t.db,
      runIds.map((runId) => ({ runId, message: `line ${k}`, data: { k, pad: 'y'.repeat(300) } })),
    )
})
afterAll(async () => {
  await t?.drop()
})

async function diskTempTables(read: () => Promise<unknown>): Promise<number> {
  const count = async () => {
    const [row] = await one.query<{ Value: string }>("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
    return Number(row?.Value)
  }
  const before = await count()
  await read()
  return (await count()) - before
}

describe('no on-disk temporary table', () => {
  it('the run list, plain and filtered by status or definition', async () => {
    expect(await diskTempTables(() => listRuns(one, { limit: 500 }))).toBe(0)
    expect(await diskTempTables(() => listRuns(one, { limit: 100, status: 'scheduled' }))).toBe(0)
    const [first] = await listRuns(one, { limit: 1 })
    expect(await diskTempTables(() => listRuns(one, { definitionId: first?.definitionId }))).toBe(0)
  })

  it('the missed sweep', async () => {
    let missed: unknown[] = []
    expect(await diskTempTables(async () => (missed = await runs.findMissed(one, new Date(), 100)))).toBe(0)
    expect(missed).toHaveLength(100)
  })

  it('the newest log lines of many runs', async () => {
    expect(await diskTempTables(() => logs.listForRuns(one, runIds, 3))).toBe(0)
  })

  it('and the sorted read it replaced does use one, so these checks can fail', async () => {
    const ph = runIds.map(() => '?').join(',')
    const old = `SELECT id, run_id, data FROM (
        SELECT id, run_id, data, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY id DESC) AS rn
          FROM event_run_logs WHERE run_id IN (${ph})) ranked WHERE rn <= 3 ORDER BY run_id, id DESC`
    expect(await diskTempTables(() => one.query(old, runIds))).toBeGreaterThan(0)
  })
})

describe('logs.listForRuns', () => {
  it('answers each run’s newest `limit` lines, newest first, grouped by run, data intact', async () => {
    const some = runIds.slice(0, 3)
    const rows = await logs.listForRuns(t.db, [...some].reverse(), 2)
    expect(rows.map((r) => [r.runId, r.message])).toEqual(
      [...some]
        .sort((a, b) => a - b)
        .flatMap((id) => [
          [id, `line ${LINES - 1}`],
          [id, `line ${LINES - 2}`],
        ]),
    )
    expect(rows[0]?.data).toEqual({ k: LINES - 1, pad: 'y'.repeat(300) })
    expect(await logs.listForRuns(t.db, [], 2)).toEqual([])
    // limit is clamped to 1..500
    expect(await logs.listForRuns(t.db, some, 0)).toHaveLength(3)
    expect(await logs.listForRuns(t.db, some, 10_000)).toHaveLength(3 * LINES)
  })
})

describe('logs.appendMany', () => {
  it('splits a batch larger than max_allowed_packet into several statements, every line landing once', async () => {
    const [packet] = await t.db.query<{ bytes: number }>('SELECT @@max_allowed_packet AS bytes')
    const runId = runIds[0] as number
    const pad = 'z'.repeat(512 * 1024)
    const lines = Math.ceil(Number(packet?.bytes) / pad.length) + 4
    const before = t.db.stats.statements
    await logs.appendMany(
      t.db,
      Array.from({ length: lines }, (_, i) => ({ runId, message: `big ${i}`, data: { i, pad } })),
    )
    expect(t.db.stats.statements - before).toBeGreaterThan(1)
    const [stored] = await t.db.query<{ n: number; bytes: number }>(
      `SELECT COUNT(*) AS n, SUM(LENGTH(data)) AS bytes FROM event_run_logs WHERE run_id = ? AND message LIKE 'big %'`,
      [runId],
    )
    expect(Number(stored?.n)).toBe(lines)
    expect(Number(stored?.bytes)).toBeGreaterThan(Number(packet?.bytes))
  })
})
