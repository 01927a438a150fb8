/**
 * Writing many runs' log lines at once (sql/eventRunLogs.ts appendMany): lines
 * that many runs' steps share word for word go in set-wise, one statement per
 * line text, and every run's lines keep their order whichever way they go in.
 */
import { beforeAll, describe, expect, it } from 'vitest'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { parseJson } from '../sql/json.ts'
import { expandProgram, type Program } from '../src/runner/program.ts'
import { useTestDb } from './helpers/db.ts'
import { makeDefinition, newRun } from './helpers/fixtures.ts'

const t = useTestDb()
const RUNS = 12
let runIds: number[] = []
/** Each run's two step ids, in seq order. */
let stepIds = new Map<number, [number, number]>()

beforeAll(async () => {
  const fx = await makeDefinition(t.db)
  const base = Date.UTC(2030, 0, 1)
  await runs.materialiseMany(
    t.db,
    Array.from({ length: RUNS }, (_, i) => newRun(fx, { scheduledFor: new Date(base + i * 1000) })),
  )
  runIds = (await runs.list(t.db, { limit: 100 })).map((r) => r.id).sort((a, b) => a - b)
  const specs = expandProgram({
    phases: [
      {
        name: 'main',
        steps: [
          { kind: 'core.log', params: { message: 'a' } },
          { kind: 'core.log', params: { message: 'b' } },
        ],
      },
    ],
  } as Program)
  await steps.expand(
    t.db,
    runIds.map((runId) => ({ runId, specs })),
  )
  stepIds = new Map()
  for (const runId of runIds) {
    const rows = await steps.listForRun(t.db, runId)
    stepIds.set(runId, [rows[0]?.id as number, rows[1]?.id as number])
  }
})

/** Each run's lines since `afterId`, oldest first, as `message@stepId`. */
async function linesByRun(afterId: number): Promise<Map<number, string[]>> {
  const rows = await t.db.query<{ run_id: number; step_id: number; message: string }>(
    'SELECT run_id, step_id, message FROM event_run_logs WHERE id > ? ORDER BY id',
    [afterId],
  )
  const out = new Map<number, string[]>()
  for (const r of rows)
    out.set(Number(r.run_id), [...(out.get(Number(r.run_id)) ?? []), `${r.message}@${r.step_id}`])
  return out
}

async function lastLogId(): Promise<number> {
  const [row] = await t.db.query<{ id: number | null }>('SELECT MAX(id) AS id FROM event_run_logs')
  return Number(row?.id ?? 0)
}

describe('logs.appendMany', () => {
  it('writes lines many runs share set-wise, one statement per line text, each run’s in order', async () => {
    const from = await lastLogId()
    const before = t.db.stats.statements
    await logs.appendMany(
      t.db,
      runIds.flatMap((runId) => {
        const [first, second] = stepIds.get(runId) as [number, number]
        return [
          { runId, stepId: first, message: 'doors open', actor: 'runner-1' },
          { runId, stepId: second, message: 'show starts', level: 'warn' as const, data: { n: 1 } },
        ]
      }),
    )
    expect(t.db.stats.statements - before).toBe(2)
    const byRun = await linesByRun(from)
    for (const runId of runIds) {
      const [first, second] = stepIds.get(runId) as [number, number]
      expect(byRun.get(runId)).toEqual([`doors open@${first}`, `show starts@${second}`])
    }
    const [row] = await t.db.query<{ level: string; actor: string | null; data: unknown }>(
      "SELECT level, actor, data FROM event_run_logs WHERE id > ? AND message = 'show starts' LIMIT 1",
      [from],
    )
    expect(row).toMatchObject({ level: 'warn', actor: null })
    expect(parseJson(row?.data, null)).toEqual({ n: 1 })
  })

  it('keeps each run’s order when runs log the same lines in different orders (one VALUES statement)', async () => {
    const from = await lastLogId()
    const before = t.db.stats.statements
    await logs.appendMany(
      t.db,
      runIds.flatMap((runId, i) => {
        const [first, second] = stepIds.get(runId) as [number, number]
        const x = { runId, stepId: first, message: 'x' }
        const y = { runId, stepId: second, message: 'y' }
        return i % 2 === 0 ? [x, y] : [y, x]
      }),
    )
    expect(t.db.stats.statements - before).toBe(1)
    const byRun = await linesByRun(from)
    for (const [i, runId] of runIds.entries()) {
      const [first, second] = stepIds.get(runId) as [number, number]
      expect(byRun.get(runId)).toEqual(
        i % 2 === 0 ? [`x@${first}`, `y@${second}`] : [`y@${second}`, `x@${first}`],
      )
    }
  })

  it('writes row by row a line without a step, a line few runs share, and a run’s repeated line', async () => {
    for (const batch of [
      runIds.map((runId) => ({ runId, message: 'no step' })),
      runIds.slice(0, 3).map((runId) => ({ runId, stepId: stepIds.get(runId)?.[0], message: 'few' })),
      runIds.flatMap((runId) => {
        const [first] = stepIds.get(runId) as [number, number]
        return [
          { runId, stepId: first, message: 'again' },
          { runId, stepId: first, message: 'again' },
        ]
      }),
    ]) {
      const from = await lastLogId()
      const before = t.db.stats.statements
      await logs.appendMany(t.db, batch)
      expect(t.db.stats.statements - before).toBe(1)
      const byRun = await linesByRun(from)
      expect([...byRun.values()].flat()).toHaveLength(batch.length)
    }
  })

  it('refuses a line whose step does not exist instead of dropping it', async () => {
    await expect(
      logs.appendMany(
        t.db,
        runIds.map((runId, i) => ({
          runId,
          stepId: i === 0 ? 999_999_999 : stepIds.get(runId)?.[0],
          message: 'm',
        })),
      ),
    ).rejects.toThrow(/a step is missing/)
  })
})
