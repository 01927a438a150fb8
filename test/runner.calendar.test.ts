/**
 * Blackout calendars and one-off changes of an occurrence, driven by the
 * runner's own tick with a hand-moved clock: a spring-forward day that is also
 * blacked out (Berlin, New York), a yearly entry, a calendar changed while
 * runs exist inside the horizon, skip → move → skip of one instant, and a
 * moved occurrence that starts under the overlap policy and behind a key.
 */
import { describe, expect, it } from 'vitest'
import * as definitionsSql from '../sql/eventDefinitions.ts'
import { backfillRuns } from '../src/operations/backfill.ts'
import { createCalendar, updateCalendar } from '../src/operations/calendars.ts'
import { updateDefinition } from '../src/operations/definitions.ts'
import { moveOccurrence, skipOccurrence, upcoming } from '../src/operations/occurrences.ts'
import { startRun } from '../src/operations/runControls.ts'
import { NO_EXCEPTIONS } from '../src/runner/calendar.ts'
import { materialiseDefinition } from '../src/runner/materialise.ts'
import { Runner } from '../src/runner/runner.ts'
import { nextOccurrences } from '../src/runner/schedule.ts'
import { useTestDb } from './helpers/db.ts'
import { unique } from './helpers/fixtures.ts'
import {
  controlDeps,
  defineEvent,
  definitionDeps,
  logLines,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  TestClock,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const HOUR = 3600_000
const LOG_ONLY = program(['main', [{ kind: 'core.log', params: { message: 'hi' } }]])
const CUE = program(['main', [{ kind: 'core.cue', params: { prompt: 'go on?' } }]])

function setup(start: string, horizonMs = 48 * HOUR) {
  const clock = new TestClock(start)
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const runner = new Runner({ db: t.db, registry: env.registry, clock, horizonMs, instanceId: unique('cal') })
  return { clock, env, runner, deps: { db: t.db, clock } }
}

async function instantsOf(definitionId: number, status?: string): Promise<string[]> {
  const rows = await t.db.query<{ scheduled_for: Date }>(
    `SELECT scheduled_for FROM event_runs WHERE definition_id = ?${status ? ' AND status = ?' : ''} ORDER BY scheduled_for`,
    status ? [definitionId, status] : [definitionId],
  )
  return rows.map((r) => r.scheduled_for.toISOString())
}

async function watermarkOf(definitionId: number): Promise<string | undefined> {
  const [row] = await t.db.query<{ materialized_through: Date }>(
    'SELECT materialized_through FROM schedule_watermarks WHERE definition_id = ?',
    [definitionId],
  )
  return row?.materialized_through.toISOString()
}

describe('a 02:30 schedule on a spring-forward day that is also blacked out', () => {
  const cases = [
    // Berlin springs forward on 2027-03-28: 02:30 does not exist and fires at 03:00 CEST (01:00Z).
    {
      zone: 'Europe/Berlin',
      day: '2027-03-28',
      jumpAt: '2027-03-28T01:00:00.000Z',
      nextDay: '2027-03-29T00:30:00.000Z',
    },
    // New York springs forward on 2027-03-14: 02:30 fires at 03:00 EDT (07:00Z).
    {
      zone: 'America/New_York',
      day: '2027-03-14',
      jumpAt: '2027-03-14T07:00:00.000Z',
      nextDay: '2027-03-15T06:30:00.000Z',
    },
  ]
  for (const c of cases) {
    it(`${c.zone}: no run on ${c.day}, one on the next day; nextOccurrences keeps the instant; upcoming says BLACKOUT`, async () => {
      const { clock, env, runner, deps } = setup(`${c.day}T00:00:00.000Z`)
      clock.advance(-12 * HOUR) // noon UTC the day before
      const cal = await createCalendar(
        deps,
        { name: unique('dst'), timezone: c.zone, entries: [{ from: c.day, label: 'Clocks change' }] },
        'admin#test',
      )
      const dark = await defineEvent(env, {
        schedule: '30 2 * * *',
        timezone: c.zone,
        calendars: [cal.name],
        program: LOG_ONLY,
      })
      const plain = await defineEvent(env, { schedule: '30 2 * * *', timezone: c.zone, program: LOG_ONLY })
      await runner.tick()
      // The control shows the jump instant is real and made without a calendar.
      expect(await instantsOf(plain.id)).toEqual([c.jumpAt, c.nextDay])
      expect(await instantsOf(dark.id)).toEqual([c.nextDay])
      // The watermark passed the blacked-out instant: nothing is waiting to be made there.
      expect(await watermarkOf(dark.id)).toBe(c.nextDay)
      await runner.tick()
      expect(await instantsOf(dark.id)).toEqual([c.nextDay])
      const next = nextOccurrences('30 2 * * *', c.zone, { after: clock.now(), count: 2 })
      expect(next.map((d) => d.toISOString())).toEqual([c.jumpAt, c.nextDay])
      const list = await upcoming(t.db, dark, { count: 2, after: clock.now() })
      expect(list.map((o) => [o.at.toISOString(), o.status, o.reason])).toEqual([
        [c.jumpAt, 'blackout', 'Clocks change'],
        [c.nextDay, 'scheduled', null],
      ])
      expect(list[1]?.run?.scheduledFor.toISOString()).toBe(c.nextDay)
    })
  }
})

it('a yearly entry blacks out the same day every year, and a yearly range may wrap the new year', async () => {
  const { env, runner, deps } = setup('2027-12-24T12:00:00.000Z', 10 * 24 * HOUR)
  const cal = await createCalendar(
    deps,
    {
      name: unique('yearly'),
      timezone: 'UTC',
      entries: [
        // Written with another year's date: only the month and day count.
        { from: '2020-12-25', yearly: true, label: 'Christmas' },
        { from: '1999-12-31', to: '2000-01-01', yearly: true, label: 'New Year' },
      ],
    },
    'admin#test',
  )
  const def = await defineEvent(env, { schedule: '0 10 * * *', calendars: [cal.name], program: LOG_ONLY })
  await runner.tick()
  expect(await instantsOf(def.id)).toEqual(
    ['2027-12-26', '2027-12-27', '2027-12-28', '2027-12-29', '2027-12-30', '2028-01-02', '2028-01-03'].map(
      (d) => `${d}T10:00:00.000Z`,
    ),
  )
})

it('a calendar changed with runs inside the horizon: withdraws what it now blacks out, makes what it frees, leaves started runs', async () => {
  const { clock, env, runner, deps } = setup('2027-06-01T12:00:00.000Z')
  const def = await defineEvent(env, { schedule: '0 * * * *', program: LOG_ONLY })
  await runner.tick()
  expect(await instantsOf(def.id)).toHaveLength(48)
  const cal = await createCalendar(
    deps,
    { name: unique('maint'), timezone: 'UTC', entries: [{ from: '2027-06-02', label: 'Maintenance' }] },
    'admin#test',
  )
  // A person's run on that day (not made by the schedule) and a run already started stay.
  const manual = await startRun(controlDeps(env), {
    definitionId: def.id,
    at: new Date('2027-06-02T05:30:00Z'),
    actor: 'op#test',
  })
  await t.db.run(`UPDATE event_runs SET status = 'running' WHERE definition_id = ? AND scheduled_for = ?`, [
    def.id,
    new Date('2027-06-02T07:00:00Z'),
  ])
  await updateDefinition(definitionDeps(env), def.id, { calendars: [cal.name] }, 'admin#test')
  const onTheDay = (list: string[]) => list.filter((at) => at.startsWith('2027-06-02'))
  expect(onTheDay(await instantsOf(def.id))).toEqual(['2027-06-02T05:30:00.000Z', '2027-06-02T07:00:00.000Z'])
  expect(await instantsOf(def.id)).toHaveLength(48 - 24 + 2)
  await runner.tick()
  expect(await instantsOf(def.id)).toHaveLength(26)
  expect((await runOf(t.db, manual.id)).status).toBe('scheduled')

  // The calendar moves to the 3rd: the 3rd's runs inside the horizon go, the 2nd's come back.
  clock.advance(60_000)
  await updateCalendar(
    deps,
    cal.id,
    { name: cal.name, timezone: 'UTC', entries: [{ from: '2027-06-03', label: 'Maintenance' }] },
    'admin#test',
  )
  expect((await instantsOf(def.id)).filter((at) => at.startsWith('2027-06-03'))).toEqual([])
  await runner.tick()
  const all = await instantsOf(def.id)
  expect(onTheDay(all)).toHaveLength(25) // 24 hourly runs and the person's 05:30
  expect(new Set(all).size).toBe(all.length)
  expect(all.filter((at) => at.startsWith('2027-06-01'))).toHaveLength(11) // 13:00..23:00, untouched
  expect(all.filter((at) => at.startsWith('2027-06-03'))).toEqual([])
})

it('skip, then move, then skip the same instant: one occurrence, never two runs, nothing else changes', async () => {
  const { clock, env, runner, deps } = setup('2027-07-01T12:00:00.000Z', 6 * HOUR)
  const def = await defineEvent(env, { schedule: '0 * * * *', scopes: ['a', 'b'], program: LOG_ONLY })
  await runner.tick() // 13:00..18:00 in both scopes
  const at = new Date('2027-07-01T14:00:00Z')
  const to = new Date('2027-07-01T14:20:00Z')
  const before = { a: await watermarkOf(def.id) }
  const skipped = await skipOccurrence(deps, {
    definitionId: def.id,
    at,
    scope: 'a',
    reason: 'storm',
    actor: 'op#1',
  })
  expect(skipped).toMatchObject({ status: 'skipped', reason: 'storm', run: null })
  // Idempotent.
  await skipOccurrence(deps, { definitionId: def.id, at, scope: 'a', reason: 'storm', actor: 'op#1' })
  const scopeA = async () =>
    (
      await t.db.query<{ scheduled_for: Date }>(
        `SELECT scheduled_for FROM event_runs WHERE definition_id = ? AND scope = 'a' ORDER BY scheduled_for`,
        [def.id],
      )
    ).map((r) => r.scheduled_for.toISOString().slice(11, 16))
  expect(await scopeA()).toEqual(['13:00', '15:00', '16:00', '17:00', '18:00'])
  const moved = await moveOccurrence(deps, {
    definitionId: def.id,
    at,
    to,
    scope: 'a',
    reason: 'later',
    actor: 'op#1',
  })
  expect(moved).toMatchObject({ status: 'moved', movedTo: to })
  expect(moved.run?.scheduledFor.toISOString()).toBe(to.toISOString())
  expect(await scopeA()).toEqual(['13:00', '14:20', '15:00', '16:00', '17:00', '18:00'])
  // Moved again: the same run moves; never two.
  const again = await moveOccurrence(deps, {
    definitionId: def.id,
    at,
    to: new Date('2027-07-01T14:40:00Z'),
    scope: 'a',
    actor: 'op#1',
  })
  expect(again.run?.id).toBe(moved.run?.id)
  expect(await scopeA()).toEqual(['13:00', '14:40', '15:00', '16:00', '17:00', '18:00'])
  const list = await upcoming(t.db, def, { count: 6, after: clock.now(), scope: 'a' })
  expect(
    list.map((o) => [o.at.toISOString().slice(11, 16), o.status, o.movedTo?.toISOString().slice(11, 16)]),
  ).toEqual([
    ['13:00', 'scheduled', undefined],
    ['14:00', 'moved', '14:40'],
    ['14:40', 'scheduled', undefined],
    ['15:00', 'scheduled', undefined],
    ['16:00', 'scheduled', undefined],
    ['17:00', 'scheduled', undefined],
  ])
  expect(list[2]?.run?.id).toBe(moved.run?.id)
  await skipOccurrence(deps, {
    definitionId: def.id,
    at,
    scope: 'a',
    reason: 'cancelled after all',
    actor: 'op#1',
  })
  expect(await scopeA()).toEqual(['13:00', '15:00', '16:00', '17:00', '18:00'])
  // Scope b, the watermark and the runner's later passes are untouched.
  expect(await watermarkOf(def.id)).toBe(before.a)
  clock.advance(2 * HOUR + 30 * 60_000) // 14:30: past the original and the moved times
  await runner.tick()
  await runner.tick()
  expect(await scopeA()).toEqual(['13:00', '15:00', '16:00', '17:00', '18:00', '19:00', '20:00'])
  const b = await t.db.query<{ n: number }>(
    `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND scope = 'b' AND scheduled_for = ?`,
    [def.id, at],
  )
  expect(Number(b[0]?.n)).toBe(1)
  const audit = await t.db.query<{ action: string; detail: string }>(
    `SELECT action, detail FROM audit_log WHERE target_id = ? AND action IN ('skipOccurrence', 'moveOccurrence') ORDER BY id`,
    [String(def.id)],
  )
  expect(audit.map((a) => a.action)).toEqual([
    'skipOccurrence',
    'skipOccurrence',
    'moveOccurrence',
    'moveOccurrence',
    'skipOccurrence',
  ])
  expect(JSON.stringify(audit[4]?.detail)).toContain('cancelled after all')
})

it('before materialisation: an occurrence beyond the horizon is skipped or moved, and the runner honours it when it gets there', async () => {
  const { clock, env, runner, deps } = setup('2027-08-01T12:00:00.000Z', 2 * HOUR)
  const def = await defineEvent(env, { schedule: '0 * * * *', program: LOG_ONLY })
  await runner.tick() // 13:00, 14:00
  await skipOccurrence(deps, {
    definitionId: def.id,
    at: new Date('2027-08-01T16:00:00Z'),
    reason: 'x',
    actor: 'op',
  })
  await moveOccurrence(deps, {
    definitionId: def.id,
    at: new Date('2027-08-01T17:00:00Z'),
    to: new Date('2027-08-01T17:30:00Z'),
    actor: 'op',
  })
  clock.advance(5 * HOUR + 30_000)
  await runner.tick()
  const mine = (await instantsOf(def.id)).map((a) => a.slice(11, 16))
  expect(mine.filter((a) => a >= '15:00' && a <= '18:00')).toEqual(['15:00', '17:30', '18:00'])
})

it('a moved occurrence obeys the overlap policy and the concurrency key at its new time', async () => {
  const { clock, env, runner, deps } = setup('2027-09-01T12:00:00.000Z', 4 * HOUR)
  // SKIP: moved into the time its previous run is still in progress, it is MISSED naming that run.
  const show = await defineEvent(env, { schedule: '0 * * * *', overlap: 'skip', program: CUE })
  // A key held by another definition's run blocks the moved run: it waits, and its log names the holder.
  const keyed = await defineEvent(env, { schedule: '0 * * * *', concurrencyKey: 'studio', program: LOG_ONLY })
  const holderDef = await defineEvent(env, { concurrencyKey: 'studio', program: CUE })
  await runner.tick()
  clock.set('2027-09-01T13:00:01Z')
  await runner.tick()
  const [first] = await t.db.query<{ id: number; status: string }>(
    `SELECT id, status FROM event_runs WHERE definition_id = ? AND scheduled_for = ?`,
    [show.id, new Date('2027-09-01T13:00:00Z')],
  )
  expect(first?.status).toBe('running')
  const moved = await moveOccurrence(deps, {
    definitionId: show.id,
    at: new Date('2027-09-01T15:00:00Z'),
    to: new Date('2027-09-01T13:10:00Z'),
    actor: 'op',
  })
  const holder = await startRun(controlDeps(env), { definitionId: holderDef.id, actor: 'op' })
  clock.set('2027-09-01T13:05:00Z')
  await runner.tick()
  expect((await runOf(t.db, holder.id)).status).toBe('running')
  const keyedMove = await moveOccurrence(deps, {
    definitionId: keyed.id,
    at: new Date('2027-09-01T14:00:00Z'),
    to: new Date('2027-09-01T13:10:00Z'),
    actor: 'op',
  })
  clock.set('2027-09-01T13:10:01Z')
  await runner.tick()
  await runner.tick()
  const movedRun = await runOf(t.db, moved.run?.id as number)
  expect(movedRun.status).toBe('missed')
  expect(movedRun.lastError).toContain(`run ${first?.id} `)
  const blocked = await runOf(t.db, keyedMove.run?.id as number)
  expect(blocked.status).toBe('scheduled')
  expect((await logLines(t.db, blocked.id)).join('\n')).toContain(`held by run ${holder.id}`)
})

it('a schedule change keeps a moved run whose original instant the schedule still has, and cancels one it no longer has', async () => {
  const { env, runner, deps } = setup('2027-10-01T12:00:00.000Z', 6 * HOUR)
  const def = await defineEvent(env, { schedule: '0 * * * *', program: LOG_ONLY })
  await runner.tick()
  const kept = await moveOccurrence(deps, {
    definitionId: def.id,
    at: new Date('2027-10-01T14:00:00Z'),
    to: new Date('2027-10-01T14:20:00Z'),
    actor: 'op',
  })
  const dropped = await moveOccurrence(deps, {
    definitionId: def.id,
    at: new Date('2027-10-01T15:00:00Z'),
    to: new Date('2027-10-01T15:20:00Z'),
    actor: 'op',
  })
  // Every two hours from now on: 14:00 is still an occurrence, 15:00 is not.
  await updateDefinition(definitionDeps(env), def.id, { schedule: '0 */2 * * *' }, 'admin#test')
  expect((await runOf(t.db, kept.run?.id as number)).status).toBe('scheduled')
  expect((await runOf(t.db, dropped.run?.id as number)).status).toBe('cancelled')
})

it('a pass that read the exceptions before a skip or a calendar change committed does not make the runs they removed', async () => {
  const { env, runner, deps, clock } = setup('2027-11-01T12:00:00.000Z', 2 * HOUR)
  const def = await defineEvent(env, { schedule: '0 * * * *', program: LOG_ONLY })
  await runner.tick() // 13:00, 14:00
  const cal = await createCalendar(deps, { name: unique('late'), timezone: 'UTC', entries: [] }, 'admin#test')
  await updateDefinition(definitionDeps(env), def.id, { calendars: [cal.name] }, 'admin#test')
  await runner.tick()
  // What a pass in flight read: the definition row and its exceptions, before the changes below.
  const stale = await definitionsSql.getById(t.db, def.id)
  await skipOccurrence(deps, {
    definitionId: def.id,
    at: new Date('2027-11-01T16:00:00Z'),
    reason: 'x',
    actor: 'op',
  })
  await updateCalendar(
    deps,
    cal.id,
    { name: cal.name, timezone: 'UTC', entries: [{ from: '2027-11-02', label: 'Closed' }] },
    'admin#test',
  )
  await materialiseDefinition(t.db, stale as NonNullable<typeof stale>, clock.now(), 20 * HOUR, NO_EXCEPTIONS)
  const made = await instantsOf(def.id)
  expect(made).not.toContain('2027-11-01T16:00:00.000Z')
  expect(made.filter((at) => at.startsWith('2027-11-02'))).toEqual([])
  expect(made).toContain('2027-11-01T17:00:00.000Z')
})

it('a backfill whose exceptions went stale before its transaction does not make a run skipped meanwhile', async () => {
  const { env, deps } = setup('2027-11-10T12:00:00.000Z', 2 * HOUR)
  const def = await defineEvent(env, { schedule: '0 * * * *', program: LOG_ONLY })
  const skipped = new Date('2027-11-09T03:00:00Z')
  // The quota is taken after the backfill read the exceptions and before its
  // transaction: a skip committed there is the race this test closes.
  const quota = {
    async take() {
      await skipOccurrence(deps, { definitionId: def.id, at: skipped, reason: 'raced', actor: 'op' })
    },
  }
  const result = await backfillRuns(
    { db: t.db, quota },
    {
      definitionId: def.id,
      from: new Date('2027-11-09T00:00:00Z'),
      to: new Date('2027-11-09T06:00:00Z'),
      actor: 'op',
    },
  )
  const made = await instantsOf(def.id)
  expect(made).not.toContain(skipped.toISOString())
  expect(made).toEqual([
    '2027-11-09T00:00:00.000Z',
    '2027-11-09T01:00:00.000Z',
    '2027-11-09T02:00:00.000Z',
    '2027-11-09T04:00:00.000Z',
    '2027-11-09T05:00:00.000Z',
  ])
  expect(result.created).toBe(5)
  expect(result.runs.map((r) => r.scheduledFor.toISOString())).toEqual(made)
})
