/**
 * Cues of a whole batch open their ladders set-wise: the runner executes a
 * round's cues at once and src/runner/cueLadder.ts reads their ladders in one
 * statement and opens the new ones, with their CUE_WAITING events and
 * deliveries, in one transaction of a few multi-row statements. So the
 * statements a burst of cues costs the ladder do not grow with the number of
 * cues (run by run it was six per cue: a read, BEGIN, three INSERTs, COMMIT),
 * and each cue still gets one ladder, one event and one delivery per channel
 * that listens (a channel narrowed away by team or definition gets none).
 * A round's opening is one round trip: its INSERTs in one text with the
 * BEGIN and the COMMIT (an opening too large for one text goes in parts of
 * the same transaction).
 */
import { expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import * as channels from '../sql/notifications/channels.ts'
import { systemClock } from '../src/runner/clock.ts'
import { DbCueLadder } from '../src/runner/cueLadder.ts'
import { Runner } from '../src/runner/runner.ts'
import { useTestDb } from './helpers/db.ts'
import { countRows, makeRunWithSteps } from './helpers/fixtures.ts'
import {
  defineEvent,
  makeRegistry,
  materialiseDueRuns,
  program,
  type RunnerTestEnv,
  waitFor,
} from './helpers/runnerHarness.ts'

const t = useTestDb()

const CUE = {
  kind: 'core.cue',
  params: { prompt: 'Lights in {{run.scope}}?', assignee: 'team:crew', timeoutSeconds: 3600 },
}

function channel(name: string, over: Partial<channels.ChannelFields> = {}): channels.ChannelFields {
  return {
    name,
    kind: 'WEBHOOK',
    target: 'http://127.0.0.1:9/hook',
    events: ['CUE_WAITING'],
    definitionIds: null,
    teams: null,
    lateStartSeconds: 60,
    signingSecret: null,
    enabled: true,
    ...over,
  }
}

/** Park `count` due cue runs with a live runner; answers the statements the ladder's own pool sent. */
async function parkCues(count: number): Promise<{ statements: number; definitionId: number }> {
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const def = await defineEvent(env, { graceSeconds: 3600, program: program(['show', [CUE]]) })
  await materialiseDueRuns(t.db, def, count)
  // The ladder on a pool of its own: its statement count is the ladder's alone.
  const ladderDb: Db = t.open()
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    instanceId: `cues-${count}`,
    tickMs: 50,
    settings: { webhookAllow: [], cueLadder: new DbCueLadder(ladderDb) },
  })
  runner.start()
  try {
    await waitFor(
      async () =>
        (await countRows(
          t.db,
          'event_run_steps s JOIN event_runs r ON r.id = s.run_id',
          's.parked = 1 AND r.definition_id = ?',
          [def.id],
        )) === count,
      { timeoutMs: 30_000, intervalMs: 50, what: `${count} cues to park` },
    )
  } finally {
    await runner.stop()
  }
  return { statements: ladderDb.stats.statements, definitionId: def.id }
}

it('a batch of cues opens its ladders, events and deliveries in a few statements, however many cues', async () => {
  await channels.create(t.db, channel('everything'))
  // Narrowed away: another team, another definition.
  await channels.create(t.db, channel('leads only', { teams: ['leads'] }))
  await channels.create(t.db, channel('another show', { definitionIds: [999_999] }))

  const few = await parkCues(10)
  const many = await parkCues(300)
  // Run by run this was about 6 statements per cue (1,800 for 300).
  expect(many.statements).toBeLessThanOrEqual(Math.max(few.statements, 5) * 3)
  expect(many.statements).toBeLessThan(30)

  for (const { definitionId, n } of [
    { definitionId: few.definitionId, n: 10 },
    { definitionId: many.definitionId, n: 300 },
  ]) {
    const inRun = 'run_id IN (SELECT id FROM event_runs WHERE definition_id = ?)'
    expect(await countRows(t.db, 'cue_ladders', inRun, [definitionId])).toBe(n)
    expect(
      await countRows(t.db, 'notification_events', `type = 'CUE_WAITING' AND ${inRun}`, [definitionId]),
    ).toBe(n)
    // One delivery per cue, all to the channel that listens, each PENDING and due.
    const rows = await t.db.query<{ name: string; n: number }>(
      `SELECT c.name, COUNT(*) AS n FROM notification_deliveries d
         JOIN notification_channels c ON c.id = d.channel_id
        WHERE d.${inRun} AND d.status = 'PENDING' AND d.next_attempt_at IS NOT NULL
        GROUP BY c.name`,
      [definitionId],
    )
    expect(rows.map((r) => [r.name, Number(r.n)])).toEqual([['everything', n]])
  }
  // Each event carries its own cue: its prompt rendered for its run.
  const [sample] = await t.db.query<{ payload: string; scope: string }>(
    `SELECT e.payload, r.scope FROM notification_events e JOIN event_runs r ON r.id = e.run_id
      WHERE r.definition_id = ? ORDER BY e.id DESC LIMIT 1`,
    [many.definitionId],
  )
  const body = typeof sample?.payload === 'string' ? JSON.parse(sample.payload) : sample?.payload
  expect(body.cue).toMatchObject({ prompt: `Lights in ${sample?.scope}?`, assignees: ['team:crew'] })
  expect(body.step.id).toBe(String(body.step.id))
})

it('a cue that asks just as a batch finishes is not left waiting', async () => {
  const { run, steps } = await makeRunWithSteps(t.db, 2)
  const ladder = new DbCueLadder(t.db)
  const now = new Date()
  let second: Promise<unknown> | null = null
  const first = cuePlan(run, steps[0]?.id as number)
  // The first cue's rungs are read in the first moment after its batch answers
  // it, before that batch's writer has let go: the second cue asks right then.
  const rungs = first.remindAfterSeconds
  Object.defineProperty(first, 'remindAfterSeconds', {
    get() {
      second ??= ladder.sync(cuePlan(run, steps[1]?.id as number), now)
      return rungs
    },
  })
  await ladder.sync(first, now)
  const stuck = new Promise((_, reject) =>
    setTimeout(() => reject(new Error('a cue was left waiting')), 5000),
  )
  await Promise.race([second, stuck])
  expect(await countRows(t.db, 'cue_ladders', 'run_id = ?', [run.id])).toBe(2)
})

function cuePlan(
  run: { id: number; definitionId: number; scope: string; scheduledFor: Date },
  stepId: number,
) {
  return {
    run: {
      id: run.id,
      definitionId: run.definitionId,
      definitionTitle: 'Cues',
      definitionSlug: 'cues',
      scope: run.scope,
      scheduledFor: run.scheduledFor,
      timezone: 'UTC',
      params: null,
      rehearsal: false,
    },
    stepId,
    prompt: `Go ${stepId}?`,
    assignees: [],
    exclusive: false,
    remindAfterSeconds: [],
    escalate: [],
    timeoutSeconds: 600,
    openedAt: new Date(),
  }
}

it('a cue whose ladder cannot be written fails alone; the rest of its batch opens', async () => {
  const { run, steps } = await makeRunWithSteps(t.db, 2)
  const plan = (stepId: number) => cuePlan(run, stepId)
  const ladder = new DbCueLadder(t.db)
  const now = new Date()
  // Asked in one turn, so one batch: the cue whose row cannot be written (an
  // assignee no JSON holds) fails it. No foreign key refuses a ladder of a step
  // that does not exist any more (migration 0024): the runner opens ladders
  // only of steps it holds.
  const unwritable = { ...plan(987_654_321), assignees: [1n as unknown as string] }
  const [a, missing, b] = await Promise.allSettled([
    ladder.sync(plan(steps[0]?.id as number), now),
    ladder.sync(unwritable, now),
    ladder.sync(plan(steps[1]?.id as number), now),
  ])
  expect(a).toMatchObject({ status: 'fulfilled', value: { deadlineAt: expect.any(Date) } })
  expect(b).toMatchObject({ status: 'fulfilled', value: { deadlineAt: expect.any(Date) } })
  expect(missing.status).toBe('rejected')
  expect(await countRows(t.db, 'cue_ladders', 'run_id = ?', [run.id])).toBe(2)
})

it("a cue's first entry opens its ladder without reading it first; one already there is read after", async () => {
  const { run, steps } = await makeRunWithSteps(t.db, 2)
  const ladderDb: Db = t.open()
  const ladder = new DbCueLadder(ladderDb)
  const now = new Date()
  const counted = async (plan: Parameters<DbCueLadder['sync']>[0]) => {
    const before = ladderDb.stats.statements
    const state = await ladder.sync(plan, now)
    return { state, statements: ladderDb.stats.statements - before }
  }
  // A re-entry reads first (one statement), then opens (the ladder, its event and deliveries between BEGIN and COMMIT).
  const reread = await counted({ ...cuePlan(run, steps[0]?.id as number), firstEntry: false })
  const first = await counted({ ...cuePlan(run, steps[1]?.id as number), firstEntry: true })
  expect(first.statements).toBe(reread.statements - 1)

  // The hint is wrong (the ladder was opened an hour ago): the opening makes
  // nothing, the ladder is read, and its own deadline stands.
  const earlier = new Date(now.getTime() - 3600_000)
  const stale = { ...cuePlan(run, steps[0]?.id as number), openedAt: earlier, firstEntry: true }
  const again = await ladder.sync(stale, now)
  expect(again.deadlineAt?.getTime()).toBe(reread.state.deadlineAt?.getTime())
  expect(await countRows(t.db, 'cue_ladders', 'run_id = ?', [run.id])).toBe(2)
  expect(await countRows(t.db, 'notification_events', "type = 'CUE_WAITING' AND run_id = ?", [run.id])).toBe(
    2,
  )
})

it('the runner tells a cue its first entry, and a re-entry at its rung that it is not one', async () => {
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock: systemClock }
  const rung = { ...CUE, params: { ...CUE.params, remindAfterSeconds: [1] } }
  const def = await defineEvent(env, { graceSeconds: 3600, program: program(['show', [rung]]) })
  await materialiseDueRuns(t.db, def, 1)
  const seen: { firstEntry: boolean | undefined }[] = []
  const ladder = new DbCueLadder(t.db)
  const recording: typeof ladder = Object.assign(Object.create(ladder), {
    sync: (plan: Parameters<DbCueLadder['sync']>[0], now: Date) => {
      seen.push({ firstEntry: plan.firstEntry })
      return ladder.sync(plan, now)
    },
  })
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    instanceId: 'first-entry',
    tickMs: 50,
    settings: { webhookAllow: [], cueLadder: recording },
  })
  runner.start()
  try {
    // The first entry opens it; the reminder a second later re-enters it.
    await waitFor(async () => seen.length >= 2, { timeoutMs: 15_000, intervalMs: 50, what: 'the reminder' })
  } finally {
    await runner.stop()
  }
  expect(seen.slice(0, 2)).toEqual([{ firstEntry: true }, { firstEntry: false }])
})

/** `count` first entries of cues of one run, asked in one turn (one batch); answers the ladder pool's counts. */
async function openTogether(
  count: number,
  prompt?: string,
): Promise<{ runId: number; statements: number; roundTrips: number }> {
  const { run } = await makeRunWithSteps(t.db, 1)
  const ladderDb: Db = t.open()
  const ladder = new DbCueLadder(ladderDb)
  const now = new Date()
  // No foreign key ties a ladder to its step (migration 0024): step ids of a block of their own.
  const base = 1_000_000 + run.id * 10_000
  await Promise.all(
    Array.from({ length: count }, (_, i) =>
      ladder.sync({ ...cuePlan(run, base + i), ...(prompt && { prompt }), firstEntry: true }, now),
    ),
  )
  return { runId: run.id, statements: ladderDb.stats.statements, roundTrips: ladderDb.stats.roundTrips }
}

/** What the run's cues opened; deliveries to `channelName` (earlier tests' channels listen too). */
async function openedFor(
  runId: number,
  channelName: string,
): Promise<{ ladders: number; events: number; deliveries: number }> {
  return {
    ladders: await countRows(t.db, 'cue_ladders', 'run_id = ?', [runId]),
    events: await countRows(t.db, 'notification_events', "type = 'CUE_WAITING' AND run_id = ?", [runId]),
    deliveries: await countRows(
      t.db,
      'notification_deliveries d JOIN notification_channels c ON c.id = d.channel_id',
      'd.run_id = ? AND c.name = ?',
      [runId, channelName],
    ),
  }
}

it("a round's cues open in one round trip: the ladders, events and deliveries between BEGIN and COMMIT in one text", async () => {
  await channels.create(t.db, channel('one trip'))
  const opened = await openTogether(40)
  // START TRANSACTION; INSERT ladders; INSERT events; INSERT deliveries; COMMIT (five round trips before).
  expect(opened).toMatchObject({ statements: 5, roundTrips: 1 })
  expect(await openedFor(opened.runId, 'one trip')).toEqual({ ladders: 40, events: 40, deliveries: 40 })
})

it('an opening of more rows than one statement holds still goes in one text, and every cue opens once', async () => {
  await channels.create(t.db, channel('two chunks'))
  // 2,001 rows: two multi-row INSERTs of ladders and of events (2,000 rows a statement at most).
  const opened = await openTogether(2001)
  expect(opened.roundTrips).toBe(1)
  expect(opened.statements).toBeGreaterThan(5)
  expect(await openedFor(opened.runId, 'two chunks')).toEqual({
    ladders: 2001,
    events: 2001,
    deliveries: 2001,
  })
})

it('an opening past one text goes in parts of one transaction, and every cue opens once', async () => {
  await channels.create(t.db, channel('in parts'))
  // 2,001 prompts of 1,000 characters: ladders and events with them are several MiB of text.
  const opened = await openTogether(2001, 'p'.repeat(1000))
  expect(opened.roundTrips).toBeGreaterThan(1)
  expect(opened.roundTrips).toBeLessThan(opened.statements)
  expect(await openedFor(opened.runId, 'in parts')).toEqual({ ladders: 2001, events: 2001, deliveries: 2001 })
})
