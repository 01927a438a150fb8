/**
 * The calendar through the real server (with its runner): calendars created,
 * listed, changed and deleted by an admin only; refusals that name the field;
 * definitions observing calendars by name; `upcoming` with BLACKOUT, SKIPPED
 * and MOVED; skip and move by an operator with a reason; deleteCalendar
 * refused while a definition uses it.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { waitFor } from './helpers/runnerHarness.ts'
import { type Auth, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer

beforeAll(async () => {
  s = await startTestServer({ runner: true, env: { MATERIALIZE_HORIZON_HOURS: '96' } })
})
afterAll(async () => {
  await s?.close()
})

const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }] }
const CALENDAR_FIELDS = 'id name timezone entries { from to yearly label }'

function code(res: { body: { errors?: { extensions?: Record<string, unknown> }[] } }) {
  return res.body.errors?.[0]?.extensions?.code
}

function createCalendar(input: Record<string, unknown>, auth: Auth = 'admin') {
  return s.gql<{ createCalendar: { id: string; name: string } }>(
    `mutation ($input: CalendarInput!) { createCalendar(input: $input) { ${CALENDAR_FIELDS} } }`,
    { variables: { input }, auth },
  )
}

async function createDefinition(input: Record<string, unknown>) {
  return s.gql<{ createDefinition: { id: string; calendars: { name: string }[] } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id calendars { name } } }`,
    { variables: { input: { slug: unique('cal'), title: 't', program: LOG_ONLY, ...input } }, auth: 'admin' },
  )
}

interface Upcoming {
  at: string
  scope: string
  status: string
  reason: string | null
  movedTo: string | null
  run: { id: string; scheduledFor: string } | null
}

async function upcomingOf(id: string, count: number, after?: string): Promise<Upcoming[]> {
  const res = await s.gql<{ definition: { upcoming: Upcoming[] } }>(
    `query ($id: ID!, $count: Int, $after: DateTime) { definition(id: $id) {
       upcoming(count: $count, after: $after) { at scope status reason movedTo run { id scheduledFor } } } }`,
    { variables: { id, count, after }, auth: 'viewer' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.definition.upcoming ?? []
}

const day = (offsetDays: number) => new Date(Date.now() + offsetDays * 86_400_000).toISOString().slice(0, 10)

it('only an admin manages calendars; a viewer lists them; bad input names each field', async () => {
  const name = unique('holidays')
  const input = {
    name,
    timezone: 'europe/berlin',
    entries: [{ from: '2030-12-25', yearly: true, label: 'Xmas' }],
  }
  expect(code(await createCalendar(input, 'operator'))).toBe('FORBIDDEN')
  expect(code(await createCalendar(input, null))).toBe('UNAUTHENTICATED')
  const made = await createCalendar(input)
  expect(made.body.errors).toBeUndefined()
  expect(made.body.data?.createCalendar).toMatchObject({
    name,
    timezone: 'Europe/Berlin',
    entries: [{ from: '2030-12-25', to: '2030-12-25', yearly: true, label: 'Xmas' }],
  })
  expect(code(await createCalendar(input))).toBe('CONFLICT')
  const listed = await s.gql<{ calendars: { name: string }[] }>('{ calendars { name } }', { auth: 'viewer' })
  expect(listed.body.data?.calendars.map((c) => c.name)).toContain(name)

  const bad = await createCalendar({
    name: 'x!',
    timezone: 'Mars/Olympus',
    entries: [{ from: '2030-02-30' }, { from: '2030-05-02', to: '2030-05-01' }, { from: 'soon' }],
  })
  expect(code(bad)).toBe('BAD_USER_INPUT')
  const message = bad.body.errors?.[0]?.message ?? ''
  for (const part of ['name:', 'timezone:', 'entries[0].from', 'entries[1].to', 'entries[2].from'])
    expect(message).toContain(part)

  const id = made.body.data?.createCalendar.id as string
  const upd = await s.gql<{ updateCalendar: { entries: { from: string; to: string }[] } }>(
    `mutation ($id: ID!, $input: CalendarInput!) { updateCalendar(id: $id, input: $input) { ${CALENDAR_FIELDS} } }`,
    {
      variables: { id, input: { ...input, entries: [{ from: '2030-01-01', to: '2030-01-03' }] } },
      auth: 'admin',
    },
  )
  expect(upd.body.data?.updateCalendar.entries).toEqual([
    { from: '2030-01-01', to: '2030-01-03', yearly: false, label: null },
  ])
  const missing = await s.gql(
    `mutation ($input: CalendarInput!) { updateCalendar(id: "999999", input: $input) { id } }`,
    { variables: { input }, auth: 'admin' },
  )
  expect(code(missing)).toBe('NOT_FOUND')
})

it('a definition observes calendars by name; upcoming says BLACKOUT; deleteCalendar is CONFLICT while used', async () => {
  const dark = day(1)
  const cal = await createCalendar({
    name: unique('dark'),
    timezone: 'UTC',
    entries: [{ from: dark, label: 'Dark day' }],
  })
  const calId = cal.body.data?.createCalendar.id as string
  const calName = cal.body.data?.createCalendar.name as string
  const unknown = await createDefinition({ schedule: '0 12 * * *', calendars: ['no-such-calendar'] })
  expect(code(unknown)).toBe('BAD_USER_INPUT')
  expect(unknown.body.errors?.[0]?.message).toContain('no-such-calendar')
  const def = await createDefinition({ schedule: '0 12 * * *', calendars: [calName] })
  expect(def.body.errors).toBeUndefined()
  expect(def.body.data?.createDefinition.calendars).toEqual([{ name: calName }])
  const id = def.body.data?.createDefinition.id as string
  const list = await upcomingOf(id, 3, `${day(0)}T12:00:00.000Z`)
  expect(list.map((o) => [o.at.slice(0, 10), o.status, o.reason])).toEqual([
    [day(1), 'BLACKOUT', 'Dark day'],
    [day(2), 'SCHEDULED', null],
    [day(3), 'SCHEDULED', null],
  ])
  // No run row at all on the dark day, once the runner materialised the horizon.
  await waitFor(async () => (await upcomingOf(id, 3, `${day(0)}T12:00:00.000Z`))[1]?.run ?? null)
  const [row] = await s.t.db.query<{ n: number }>(
    'SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND scheduled_for = ?',
    [id, new Date(`${dark}T12:00:00.000Z`)],
  )
  expect(Number(row?.n)).toBe(0)

  const del = (auth: Auth) =>
    s.gql<{ deleteCalendar: boolean }>('mutation ($id: ID!) { deleteCalendar(id: $id) }', {
      variables: { id: calId },
      auth,
    })
  expect(code(await del('operator'))).toBe('FORBIDDEN')
  const refused = await del('admin')
  expect(code(refused)).toBe('CONFLICT')
  expect(refused.body.errors?.[0]?.message).toContain('1 definition')
  const cleared = await s.gql(
    `mutation ($id: ID!) { updateDefinition(id: $id, input: { calendars: [] }) { id calendars { name } } }`,
    { variables: { id }, auth: 'admin' },
  )
  expect(cleared.body.errors).toBeUndefined()
  expect((await del('admin')).body.data?.deleteCalendar).toBe(true)
  expect(code(await del('admin'))).toBe('NOT_FOUND')
})

it('skipOccurrence and moveOccurrence: operator only, reason required for a skip, the instant must be an occurrence', async () => {
  const def = await createDefinition({ schedule: '0 12 * * *', scopes: ['', 'east'] })
  const id = def.body.data?.createDefinition.id as string
  const at = `${day(2)}T12:00:00.000Z`
  const to = `${day(2)}T15:00:00.000Z`
  const skip = (vars: Record<string, unknown>, auth: Auth = 'operator') =>
    s.gql<{ skipOccurrence: Upcoming }>(
      `mutation ($d: ID!, $at: DateTime!, $scope: String, $reason: String!) {
         skipOccurrence(definitionId: $d, at: $at, scope: $scope, reason: $reason) { at scope status reason movedTo run { id } } }`,
      { variables: { d: id, at, reason: 'storm', ...vars }, auth },
    )
  const move = (vars: Record<string, unknown>, auth: Auth = 'operator') =>
    s.gql<{ moveOccurrence: Upcoming }>(
      `mutation ($d: ID!, $at: DateTime!, $to: DateTime!, $scope: String, $reason: String) {
         moveOccurrence(definitionId: $d, at: $at, to: $to, scope: $scope, reason: $reason) { at scope status reason movedTo run { id scheduledFor } } }`,
      { variables: { d: id, at, to, ...vars }, auth },
    )
  expect(code(await skip({}, 'viewer'))).toBe('FORBIDDEN')
  expect(code(await skip({ reason: '  ' }))).toBe('BAD_USER_INPUT')
  expect(code(await skip({ at: `${day(2)}T12:01:00.000Z` }))).toBe('BAD_USER_INPUT')
  expect(code(await skip({ scope: 'west' }))).toBe('BAD_USER_INPUT')
  expect(code(await skip({ d: '999999' }))).toBe('NOT_FOUND')
  expect(code(await move({ to: '2001-01-01T00:00:00.000Z' }))).toBe('BAD_USER_INPUT')
  expect(code(await move({ to: `${day(3)}T12:00:00.000Z` }))).toBe('CONFLICT') // another occurrence's instant

  const skipped = await skip({})
  expect(skipped.body.data?.skipOccurrence).toMatchObject({
    at,
    scope: '',
    status: 'SKIPPED',
    reason: 'storm',
    run: null,
  })
  const moved = await move({ scope: 'east', reason: 'later crowd' })
  expect(moved.body.errors).toBeUndefined()
  expect(moved.body.data?.moveOccurrence).toMatchObject({ at, scope: 'east', status: 'MOVED', movedTo: to })
  expect(moved.body.data?.moveOccurrence.run?.scheduledFor).toBe(to)
  const list = (await upcomingOf(id, 6, `${day(2)}T00:00:00.000Z`)).map((o) => [
    o.at,
    o.scope,
    o.status,
    o.movedTo,
  ])
  expect(list.slice(0, 3)).toEqual([
    [at, '', 'SKIPPED', null],
    [at, 'east', 'MOVED', to],
    [to, 'east', 'SCHEDULED', null],
  ])
})

it('upcoming of a paused definition says why nothing will start, and has no runs; ACTIVE again clears it', async () => {
  const def = await createDefinition({ schedule: '0 12 * * *' })
  const id = def.body.data?.createDefinition.id as string
  const after = `${day(0)}T12:00:00.000Z`
  await waitFor(async () => (await upcomingOf(id, 2, after))[0]?.run ?? null)
  const setState = (state: string) =>
    s.gql(
      'mutation ($id: ID!, $state: DefinitionState!) { setDefinitionState(id: $id, state: $state) { state } }',
      {
        variables: { id, state },
        auth: 'admin',
      },
    )
  expect((await setState('PAUSED')).body.errors).toBeUndefined()
  const paused = await upcomingOf(id, 2, after)
  expect(paused.map((o) => [o.status, o.run])).toEqual([
    ['SCHEDULED', null],
    ['SCHEDULED', null],
  ])
  for (const o of paused) expect(o.reason).toMatch(/paused/)
  expect((await setState('ACTIVE')).body.errors).toBeUndefined()
  expect((await upcomingOf(id, 2, after)).map((o) => o.reason)).toEqual([null, null])
})
