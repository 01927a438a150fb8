/**
 * The batch path for every kind of step (src/runner/advance.ts): a show of many
 * runs (announce, wait, call out, wrap up) advances in rounds of set-wise
 * statements, not a dozen per run; a slow webhook does not hold its round; a
 * cancel lands between two rounds; cues park set-wise and wake at their
 * timeouts.
 */
import { expect, it } from 'vitest'
import { DatabaseError, type Db } from '../sql/db.ts'
import type { DefinitionRow } from '../sql/eventDefinitions.ts'
import { cancelRun, startRun } from '../src/operations/runControls.ts'
import { systemClock } from '../src/runner/clock.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import type { AnyStepKind } from '../src/runner/steps/registry.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  runOf,
  statusCounts,
  stepsOf,
  TestClock,
  useReceiver,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const receiver = useReceiver({ resetEach: true })

const dueRuns = (def: Pick<DefinitionRow, 'id' | 'currentVersionId'>, count: number) =>
  materialiseDueRuns(t.db, def, count)

/** A show of a webhook to the receiver's /hooks/go, then a log line `after`, for runs made due at once. */
function webhookThenLog(env: RunnerTestEnv) {
  return defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [
        { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/go` } },
        { kind: 'core.log', params: { message: 'after' } },
      ],
    ]),
  })
}

/** Hold the first webhook call this test makes (the receiver numbers calls across tests); answer the rest. */
function holdFirstCall(): void {
  let first: number | null = null
  receiver.route('/hooks/', (call) => {
    first ??= call.seq
    return call.seq === first ? { hold: true } : { status: 200 }
  })
}

/** `db` counting the UPDATEs of step rows it sends, outside transactions and in them. */
function countingStepUpdates(db: Db): { db: Db; count: () => number } {
  let n = 0
  const counting: Parameters<typeof wrapStatements>[2] = (real) => (sql, args) => {
    if (/^\s*UPDATE event_run_steps/.test(sql)) n++
    return real(sql, args)
  }
  const wrapped = wrapStatements(wrapStatements(db, 'run', counting), 'runQuery', counting)
  return { db: wrapped, count: () => n }
}

function liveRunner(db: Db, instanceId: string): Runner {
  return new Runner({
    db,
    registry: makeRegistry(),
    instanceId,
    tickMs: 50,
    settings: { webhookAllow: parseAllowList(`${receiver.url}/hooks/`).prefixes },
  })
}

it('a show for 200 runs advances in set-wise rounds: each webhook once, a few step UPDATEs in all', async () => {
  const RUNS = 200
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program([
      'show',
      [
        { kind: 'core.log', params: { message: 'doors open in {{run.scope}} ({{definition.slug}})' } },
        { kind: 'core.wait', params: { seconds: 1 } },
        { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/announce` } },
        { kind: 'core.log', params: { message: 'announced' } },
      ],
    ]),
  })
  const ids = await dueRuns(def, RUNS)
  const counted = countingStepUpdates(t.db)
  const runner = liveRunner(counted.db, 'show')
  runner.start()
  try {
    await waitFor(async () => (await statusCounts(t.db, def.id)).completed === RUNS, {
      timeoutMs: 30_000,
      intervalMs: 50,
      what: 'every run of the show to complete',
    })
  } finally {
    await runner.stop()
  }
  const perKey = receiver.countsByKey()
  expect(perKey.size).toBe(RUNS)
  expect([...perKey.values()].every((n) => n === 1)).toBe(true)
  // Run by run this was 8 step UPDATEs per run (begin and sleep, resume and
  // complete, begin and complete twice); set-wise it is a few per round, and
  // outcomes that settle one by one are grouped while the last group is written.
  expect(counted.count()).toBeLessThan(RUNS)

  // What each step answered is kept with it, each its own.
  const steps = await stepsOf(t.db, ids[7] as number)
  expect(steps.map((s) => [s.kind, s.status, s.attempts])).toEqual([
    ['core.log', 'completed', 1],
    ['core.wait', 'completed', 1],
    ['core.webhook', 'completed', 1],
    ['core.log', 'completed', 1],
  ])
  expect(steps[1]?.result).toMatchObject({ wakeAt: expect.any(String) })
  expect(steps[2]?.result).toMatchObject({ status: 200 })
  expect(await logLines(t.db, ids[7] as number)).toEqual(
    expect.arrayContaining([`doors open in s7 (${def.slug})`, 'announced']),
  )
  const leftovers = await t.db.query<{ n: number }>(
    'SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND claimed_by IS NOT NULL',
    [def.id],
  )
  expect(Number(leftovers[0]?.n)).toBe(0)
})

it('a webhook far slower than its round goes on alone: the rest of its batch finishes meanwhile', async () => {
  const RUNS = 12
  holdFirstCall()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await webhookThenLog(env)
  await dueRuns(def, RUNS)
  const runner = liveRunner(t.db, 'straggler')
  runner.start()
  try {
    await waitFor(
      async () =>
        receiver.pending().length === 1 && (await statusCounts(t.db, def.id)).completed === RUNS - 1,
      { timeoutMs: 10_000, intervalMs: 20, what: 'every run but the held one to complete' },
    )
    const held = receiver.pending()[0]?.key as string
    const heldRun = Number(held.split('-')[0])
    expect(await runOf(t.db, heldRun)).toMatchObject({ status: 'running', claimedBy: 'straggler' })
    receiver.releaseHeld()
    await waitFor(async () => (await statusCounts(t.db, def.id)).completed === RUNS, {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'the held run to complete once answered',
    })
    expect((await stepsOf(t.db, heldRun)).map((s) => [s.status, s.attempts])).toEqual([
      ['completed', 1],
      ['completed', 1],
    ])
  } finally {
    await runner.stop()
  }
  expect([...receiver.countsByKey().values()].every((n) => n === 1)).toBe(true)
})

it('a run cancelled while its round’s webhooks are in flight stops there; the others go on', async () => {
  const RUNS = 5
  receiver.route('/hooks/', () => ({ hold: true }))
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await webhookThenLog(env)
  const ids = await dueRuns(def, RUNS)
  const runner = liveRunner(t.db, 'cancel')
  runner.start()
  try {
    await waitFor(() => receiver.pending().length === RUNS, {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'every webhook to be in flight',
    })
    const victim = ids[2] as number
    expect((await cancelRun(controlDeps(env), victim, 'op#1')).applied).toBe(true)
    receiver.releaseHeld()
    await waitFor(async () => (await statusCounts(t.db, def.id)).completed === RUNS - 1, {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'the other runs to complete',
    })
    expect(await runOf(t.db, victim)).toMatchObject({ status: 'cancelled', claimedBy: null })
    expect((await stepsOf(t.db, victim)).map((s) => s.status)).toEqual(['cancelled', 'cancelled'])
    expect(await logLines(t.db, victim)).not.toContain('after')
  } finally {
    await runner.stop()
  }
})

it('cues of a whole batch park together, each logged and woken at its own timeout', async () => {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const def = await defineEvent(env, {
    program: program([
      'show',
      [
        {
          kind: 'core.cue',
          params: { prompt: 'Lights in {{run.scope}}', timeoutSeconds: 60, onTimeout: 'continue' },
        },
        { kind: 'core.log', params: { message: 'after the cue in {{definition.slug}}' } },
      ],
    ]),
  })
  // Runs a person started.
  const starts: number[] = []
  for (let i = 0; i < 3; i++) {
    starts.push(
      (await startRun(controlDeps(env), { definitionId: def.id, scope: `hall${i}`, actor: 'op#1' })).id,
    )
  }
  const counted = countingStepUpdates(t.db)
  const runner = new Runner({
    db: counted.db,
    registry: env.registry,
    clock,
    instanceId: 'cues',
  })
  await runner.tick()
  for (const [i, id] of starts.entries()) {
    const [cue] = await stepsOf(t.db, id)
    expect(cue).toMatchObject({ status: 'running', parked: true, claimedBy: null })
    expect(cue?.wakeAt?.getTime()).toBe(clock.now().getTime() + 60_000)
    expect(await runOf(t.db, id)).toMatchObject({ status: 'running', claimedBy: null })
    expect((await runOf(t.db, id)).wakeAt?.getTime()).toBe(clock.now().getTime() + 60_000)
    // The prompt as the cue step saw it, its placeholders filled in.
    expect(await logLines(t.db, id)).toContain(`waiting on a person: Lights in hall${i}`)
  }
  // Begun together and set aside together.
  expect(counted.count()).toBeLessThanOrEqual(3)

  // The timeouts come due together: resumed and continued set-wise, then the log step.
  clock.advance(60_000)
  await runner.tick()
  for (const id of starts) {
    expect((await stepsOf(t.db, id)).map((s) => [s.status, s.attempts])).toEqual([
      ['completed', 1],
      ['completed', 1],
    ])
    expect(await runOf(t.db, id)).toMatchObject({ status: 'completed' })
    expect(await logLines(t.db, id)).toContain(`after the cue in ${def.slug}`)
  }
})

it('a step’s log lines are written while it runs, not held until its round ends', async () => {
  let open: () => void = () => {}
  const gate = new Promise<void>((resolve) => {
    open = resolve
  })
  const slow: AnyStepKind = {
    kind: 'test.slow',
    sideEffects: false,
    validate: () => [],
    async execute(ctx) {
      await ctx.log('info', `working on ${ctx.run.scope}`)
      await gate
      return { type: 'completed' }
    },
  }
  const registry = makeRegistry([slow])
  const env: RunnerTestEnv = { db: t.db, registry, clock: systemClock }
  const def = await defineEvent(env, {
    graceSeconds: 3600,
    program: program(['show', [{ kind: 'test.slow', params: {} }]]),
  })
  const ids = await dueRuns(def, 3)
  const runner = new Runner({ db: t.db, registry, instanceId: 'lines', tickMs: 50 })
  runner.start()
  try {
    await waitFor(
      async () => {
        for (const id of ids)
          if (!(await logLines(t.db, id)).some((l) => l.startsWith('working on'))) return false
        return true
      },
      { timeoutMs: 10_000, intervalMs: 20, what: 'every run’s line while its step still runs' },
    )
    expect(await statusCounts(t.db, def.id)).toEqual({ running: 3 })
    open()
    await waitFor(async () => (await statusCounts(t.db, def.id)).completed === 3, {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'the runs to complete',
    })
  } finally {
    open()
    await runner.stop()
  }
})

it('a receiver down for a whole batch: its attempts fail together, wait out their backoff degraded, and retry set-wise', async () => {
  const RUNS = 30
  receiver.route('/hooks/flaky', (_call, n) => (n === 1 ? { status: 500, body: 'down' } : { status: 200 }))
  receiver.route('/hooks/down', () => ({ status: 503 }))
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const show = (url: string, extra: object) =>
    defineEvent(env, {
      program: program([
        'show',
        [
          { kind: 'core.webhook', params: { url }, ...extra },
          { kind: 'core.log', params: { message: 'after the webhook' } },
        ],
      ]),
    })
  const flaky = await show(`${receiver.url}/hooks/flaky`, { retry: { attempts: 3, backoffSeconds: 1 } })
  // Failed for good at once, and the run goes on degraded.
  const down = await show(`${receiver.url}/hooks/down`, { retry: { attempts: 1 }, onError: 'degrade' })
  const ids: number[] = []
  for (let i = 0; i < RUNS; i++)
    ids.push((await startRun(controlDeps(env), { definitionId: flaky.id, scope: `s${i}`, actor: 'op#1' })).id)
  const degraded = (await startRun(controlDeps(env), { definitionId: down.id, actor: 'op#1' })).id
  const counted = countingStepUpdates(t.db)
  const runner = new Runner({
    db: counted.db,
    registry: env.registry,
    clock,
    instanceId: 'retries',
    settings: { webhookAllow: parseAllowList(`${receiver.url}/hooks/`).prefixes },
  })

  await runner.tick()
  expect(receiver.calls).toHaveLength(RUNS + 1)
  for (const id of ids) {
    const [hook] = await stepsOf(t.db, id)
    expect(hook).toMatchObject({ status: 'pending', attempts: 1, claimedBy: null })
    expect(hook?.lastError).toMatch(/HTTP 500/)
    expect(hook?.wakeAt?.getTime()).toBeGreaterThan(clock.now().getTime())
    expect(await runOf(t.db, id)).toMatchObject({ status: 'running', health: 'degraded', claimedBy: null })
    expect((await runOf(t.db, id)).wakeAt?.getTime()).toBe(hook?.wakeAt?.getTime())
    expect(
      (await logLines(t.db, id)).some((l) => /attempt 1 of 3 failed: .*HTTP 500.*retrying at/.test(l)),
    ).toBe(true)
  }
  expect((await stepsOf(t.db, degraded)).map((s) => s.status)).toEqual(['failed', 'completed'])
  expect(await runOf(t.db, degraded)).toMatchObject({ status: 'completed', health: 'degraded' })
  expect(
    (await logLines(t.db, degraded)).some((l) => /continuing degraded \(onError: degrade\)/.test(l)),
  ).toBe(true)
  // Begun together, failed together: not a few statements per run.
  const firstTick = counted.count()
  expect(firstTick).toBeLessThan(10)

  clock.advance(2000)
  await runner.tick()
  for (const id of ids) {
    expect((await stepsOf(t.db, id)).map((s) => [s.status, s.attempts])).toEqual([
      ['completed', 2],
      ['completed', 1],
    ])
    // The retry succeeded: the run is whole again.
    expect(await runOf(t.db, id)).toMatchObject({ status: 'completed', health: 'ok' })
  }
  expect(counted.count() - firstTick).toBeLessThan(10)
  expect([...receiver.countsByKey().entries()].filter(([, n]) => n === 2)).toHaveLength(RUNS)
})

it('a batch that fails part-way gives its claims back, and a run gone on alone still finishes and is released', async () => {
  holdFirstCall()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await webhookThenLog(env)
  const ids = await dueRuns(def, 3)
  // The database refuses the round after the webhooks (its log lines), once.
  let faults = 0
  const faulty = wrapStatements(t.db, 'runQuery', (real) => async (sql, args) => {
    if (faults === 0 && /^\s*INSERT INTO event_run_logs/.test(sql)) {
      faults++
      throw new DatabaseError(
        'The database refused a write (injected fault).',
        Object.assign(new Error('injected'), { errno: 1406, code: 'ER_DATA_TOO_LONG' }),
      )
    }
    return real(sql, args)
  })
  const runner = new Runner({
    db: faulty,
    registry: env.registry,
    instanceId: 'part-way',
    settings: { webhookAllow: parseAllowList(`${receiver.url}/hooks/`).prefixes },
  })
  const tick = runner.tick()
  const outcome = tick.then(
    () => null,
    (err: unknown) => err,
  )
  await waitFor(() => faults === 1 && receiver.pending().length === 1, {
    timeoutMs: 10_000,
    intervalMs: 10,
    what: 'the batch to fail while one webhook is held',
  })
  const held = Number(String(receiver.pending()[0]?.key ?? '').split('-')[0])
  // The runs the failed batch held are given back at once; the one gone on alone is still its own.
  await waitFor(
    async () => {
      const claimed = await t.db.query<{ id: number }>(
        'SELECT id FROM event_runs WHERE definition_id = ? AND claimed_by IS NOT NULL',
        [def.id],
      )
      return claimed.length === 1 && Number(claimed[0]?.id) === held
    },
    { timeoutMs: 10_000, intervalMs: 10, what: 'every claim but the held run’s to be given back' },
  )
  receiver.releaseHeld()
  expect(await outcome).toBeInstanceOf(DatabaseError)
  expect(await runOf(t.db, held)).toMatchObject({ status: 'completed', claimedBy: null })
  expect(await logLines(t.db, held)).toContain('after')
  for (const id of ids.filter((id) => id !== held))
    expect(await runOf(t.db, id)).toMatchObject({ status: 'running', claimedBy: null })
})
