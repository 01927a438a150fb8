/**
 * A pass's hand-off of many runs moves on in chunks (src/runner/chunkedAdvance.ts):
 * the first runs reach their next step while later ones still call out, the
 * chunks together keep no more calls in flight than RUNNER_PARALLELISM, in
 * due order, and every call is made once.
 */
import { expect, it } from 'vitest'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb } from './helpers/db.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  stepsOf,
  useReceiver,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const receiver = useReceiver({ resetEach: true })

/** Most calls the receiver held at once (from their arrival to their answer). */
function mostInFlight(): number {
  const edges = receiver.calls.flatMap((c) => [
    [c.receivedAt, 1],
    [c.answeredAt ?? Number.POSITIVE_INFINITY, -1],
  ])
  // At equal times an answer comes before an arrival: a slot freed, then taken.
  edges.sort((a, b) => (a[0] as number) - (b[0] as number) || (a[1] as number) - (b[1] as number))
  let now = 0
  let most = 0
  for (const [, d] of edges) {
    now += d as number
    most = Math.max(most, now)
  }
  return most
}

it('2 at a time, 64 runs (4 chunks of 16): the first cues park while later runs still call out, in due order, each call once', async () => {
  const RUNS = 64
  const PARALLELISM = 2
  receiver.route('/hooks/', () => ({ status: 200, delayMs: 40 }))
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [
        { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/go` } },
        { kind: 'core.cue', params: { prompt: 'Ready?' } },
      ],
    ]),
  })
  const ids = await dueRuns(def, RUNS)
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    clock: systemClock,
    instanceId: 'chunks',
    tickMs: 50,
    parallelism: PARALLELISM,
    settings: { webhookAllow: parseAllowList(`${receiver.url}/hooks/`).prefixes },
  })
  runner.start()
  try {
    await waitFor(
      async () => {
        const parked = await t.db.query<{ n: number }>(
          `SELECT COUNT(*) AS n FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
            WHERE r.definition_id = ? AND s.kind = 'core.cue' AND s.parked = 1`,
          [def.id],
        )
        return Number(parked[0]?.n) === RUNS
      },
      { timeoutMs: 30_000, intervalMs: 50, what: 'every run to park its cue' },
    )
  } finally {
    await runner.stop()
  }
  // Each call once, and never more at once than the one batch had places.
  const perKey = receiver.countsByKey()
  expect(perKey.size).toBe(RUNS)
  expect([...perKey.values()].every((n) => n === 1)).toBe(true)
  expect(mostInFlight(), 'calls in flight at once').toBeLessThanOrEqual(PARALLELISM)

  // As one batch, no cue began before the round's last call was answered
  // (64 calls of 40 ms, 2 at a time: 1.3 s); in chunks the first chunk's cues
  // park after its own 16 calls (0.3 s), while the last chunk's are still to come.
  const cueStarts: number[] = []
  for (const id of ids) {
    const cue = (await stepsOf(t.db, id)).find((s) => s.kind === 'core.cue')
    cueStarts.push(cue?.startedAt?.getTime() ?? Number.NaN)
  }
  const lastCallArrived = Math.max(...receiver.calls.map((c) => c.receivedAt))
  expect(Math.min(...cueStarts), 'the first cue began before the last call arrived').toBeLessThan(
    lastCallArrived,
  )
  // Due order: the first chunk's calls are all made before the last chunk's,
  // but for the places a later chunk may take while the first is still
  // reading its round (at most PARALLELISM calls).
  const arrivals = (chunk: number) =>
    receiver.calls
      .filter((c) => ids.slice(chunk * 16, chunk * 16 + 16).includes(Number(String(c.key).split('-')[0])))
      .map((c) => c.receivedAt)
      .sort((a, b) => a - b)
  const lastChunk = arrivals(3)
  expect(lastChunk).toHaveLength(16)
  expect(Math.max(...arrivals(0)), 'the first chunk called before the last').toBeLessThan(
    lastChunk[PARALLELISM] as number,
  )
})

const dueRuns = (def: Parameters<typeof materialiseDueRuns>[1], count: number) =>
  materialiseDueRuns(t.db, def, count)
