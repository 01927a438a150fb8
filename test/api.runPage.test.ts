/**
 * `runPage` over 100,000 runs through the real server: each filter field (and
 * mixes of them) answers what an independent SQL oracle says, in order, page
 * after page; pages after a cursor do not move when runs are inserted; a page
 * deep in the list reads about the rows the first page reads (InnoDB handler
 * counters, not time); bad arguments are BAD_USER_INPUT; a viewer may read,
 * a caller without a token may not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db, SqlValue } from '../sql/db.ts'
import { pageKeys, type RunPageFilter, runPage } from '../sql/runPage.ts'
import { encodeCursor } from '../src/api/runFilter.ts'
import { type DefinitionFixture, makeDefinition } from './helpers/fixtures.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

const RUNS = 100_000
/** The newest bulk run is scheduled here; older ones step back half a second each pair. */
const BASE = Date.parse('2030-01-01T00:00:00.000Z')

let s: TestServer
let defs: DefinitionFixture[] = []
/** One session (a pool of one connection), so session counters see only our statements. */
let probe: Db

beforeAll(async () => {
  s = await startTestServer()
  defs = [await makeDefinition(s.t.db), await makeDefinition(s.t.db), await makeDefinition(s.t.db)]
  const [a, b, c] = defs as [DefinitionFixture, DefinitionFixture, DefinitionFixture]
  // Set-wise, from MariaDB's sequence engine: 100,000 rows in one statement.
  // Two runs share each scheduled_for (ties are broken by id), the scope cycles
  // through 3 values (so the pair never collides on the occurrence key), the
  // definition through 7 slots, the status through 20, and one run in 11 is a
  // rehearsal: every filter has plenty of matches and plenty of misses.
  await s.t.db.query(
    `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, rehearsal, status, started_by)
     SELECT CASE WHEN seq % 7 < 4 THEN ? WHEN seq % 7 < 6 THEN ? ELSE ? END,
            CASE WHEN seq % 7 < 4 THEN ? WHEN seq % 7 < 6 THEN ? ELSE ? END,
            ELT(1 + seq % 3, '', 'a', 'b'),
            ? - INTERVAL (seq DIV 2) * 500000 MICROSECOND,
            'UTC',
            IF(seq % 11 = 0, 1, 0),
            ELT(1 + (seq DIV 3) % 20, 'scheduled', 'running', 'paused', 'failed', 'cancelled', 'missed',
                'starting', 'ending', 'completed', 'completed', 'completed', 'completed', 'completed',
                'completed', 'completed', 'completed', 'completed', 'completed', 'completed', 'completed'),
            'schedule'
       FROM seq_0_to_${RUNS - 1}`,
    [a.def.id, b.def.id, c.def.id, a.version.id, b.version.id, c.version.id, new Date(BASE)],
  )
  await s.t.db.query('ANALYZE TABLE event_runs')
  probe = s.t.open({ connectionLimit: 1 })
}, 120_000)
afterAll(async () => {
  await s?.close()
})

/** A RunFilter as the test writes it: GraphQL values. */
interface Filter {
  definitionId?: string
  statuses?: string[]
  scope?: string
  scheduledAfter?: string
  scheduledBefore?: string
  rehearsal?: boolean
}

/** The oracle: the same question in plain SQL, written independently of sql/runPage.ts. */
async function expectedIds(filter: Filter, limit: number, offset = 0): Promise<string[]> {
  const where: string[] = []
  const args: SqlValue[] = []
  if (filter.definitionId !== undefined) {
    where.push('definition_id = ?')
    args.push(Number(filter.definitionId))
  }
  if (filter.statuses !== undefined) {
    if (filter.statuses.length === 0) return []
    where.push(`status IN (${filter.statuses.map(() => '?').join(',')})`)
    args.push(...filter.statuses.map((x) => x.toLowerCase()))
  }
  if (filter.scope !== undefined) {
    where.push('scope = ?')
    args.push(filter.scope)
  }
  if (filter.rehearsal !== undefined) {
    where.push('rehearsal = ?')
    args.push(filter.rehearsal ? 1 : 0)
  }
  if (filter.scheduledAfter !== undefined) {
    where.push('scheduled_for >= ?')
    args.push(new Date(filter.scheduledAfter))
  }
  if (filter.scheduledBefore !== undefined) {
    where.push('scheduled_for < ?')
    args.push(new Date(filter.scheduledBefore))
  }
  const rows = await s.t.db.query<{ id: number }>(
    `SELECT id FROM event_runs ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY scheduled_for DESC, id DESC LIMIT ${limit} OFFSET ${offset}`,
    args,
  )
  return rows.map((r) => String(r.id))
}

interface Page {
  ids: string[]
  endCursor: string | null
  hasNextPage: boolean
}

const PAGE_QUERY = `query ($filter: RunFilter, $first: Int, $after: String) {
  runPage(filter: $filter, first: $first, after: $after) {
    nodes { id scheduledFor status scope rehearsal definition { id } }
    pageInfo { endCursor hasNextPage }
  }
}`

async function page(filter: Filter | null, first?: number, after?: string | null): Promise<Page> {
  const r = await s.gql<{
    runPage: { nodes: { id: string }[]; pageInfo: { endCursor: string | null; hasNextPage: boolean } }
  }>(PAGE_QUERY, { variables: { filter, first, after }, auth: 'viewer' })
  if (r.body.errors) throw new Error(JSON.stringify(r.body.errors))
  const p = r.body.data?.runPage
  if (!p) throw new Error('no runPage')
  return { ids: p.nodes.map((n) => n.id), ...p.pageInfo }
}

async function errorOf(variables: Record<string, unknown>): Promise<{ code: string; message: string }> {
  const r = await s.gql(PAGE_QUERY, { variables, auth: 'viewer' })
  const e = r.body.errors?.[0]
  return { code: String(e?.extensions?.code), message: String(e?.message) }
}

const iso = (ms: number) => new Date(ms).toISOString()

describe('runPage answers', () => {
  it('newest first by (scheduledFor, id), 50 by default, page after page', async () => {
    const p1 = await page(null)
    expect(p1.ids).toEqual(await expectedIds({}, 50))
    expect(p1.hasNextPage).toBe(true)
    const p2 = await page(null, undefined, p1.endCursor)
    expect(p2.ids).toEqual(await expectedIds({}, 50, 50))
    // Ties on scheduledFor exist and are ordered by id, newest first.
    const rows = await s.t.db.query<{ n: number }>(
      'SELECT COUNT(*) AS n FROM (SELECT scheduled_for FROM event_runs GROUP BY scheduled_for HAVING COUNT(*) > 1) t',
    )
    expect(Number(rows[0]?.n)).toBeGreaterThan(1000)
  })

  it('each filter field, alone and mixed, matches the oracle on two pages', async () => {
    const [a, b] = defs.map((d) => String(d.def.id)) as [string, string]
    const mid = BASE - 10_000_000
    const cases: Filter[] = [
      { definitionId: a },
      { definitionId: b },
      { statuses: ['RUNNING'] },
      { statuses: ['COMPLETED', 'FAILED', 'PAUSED'] },
      { statuses: ['SCHEDULED', 'STARTING', 'RUNNING', 'PAUSED', 'ENDING'] },
      { scope: 'a' },
      { scope: '' },
      { rehearsal: true },
      { rehearsal: false },
      { scheduledAfter: iso(mid) },
      { scheduledBefore: iso(mid) },
      { scheduledAfter: iso(mid - 600_000), scheduledBefore: iso(mid) },
      { definitionId: b, statuses: ['FAILED', 'MISSED'] },
      { definitionId: a, scope: 'b', rehearsal: false },
      { statuses: ['CANCELLED'], scope: 'a', scheduledBefore: iso(mid) },
      { scope: 'b', rehearsal: true, scheduledAfter: iso(mid) },
    ]
    for (const filter of cases) {
      const p1 = await page(filter, 100)
      expect(p1.ids, JSON.stringify(filter)).toEqual(await expectedIds(filter, 100))
      expect(p1.ids.length, JSON.stringify(filter)).toBe(100)
      const p2 = await page(filter, 100, p1.endCursor)
      expect(p2.ids, JSON.stringify(filter)).toEqual(await expectedIds(filter, 100, 100))
    }
  })

  it('a walk to the end returns every match exactly once, then an empty page', async () => {
    const filter: Filter = { definitionId: String(defs[2]?.def.id), statuses: ['FAILED', 'SCHEDULED'] }
    const all = await expectedIds(filter, 100_000)
    expect(all.length).toBeGreaterThan(1000)
    const seen: string[] = []
    let after: string | null = null
    for (;;) {
      const p: Page = await page(filter, 500, after)
      seen.push(...p.ids)
      if (!p.hasNextPage) {
        expect(p.ids.length).toBeGreaterThan(0)
        after = p.endCursor
        break
      }
      after = p.endCursor
    }
    expect(seen).toEqual(all)
    const beyond = await page(filter, 500, after)
    expect(beyond).toEqual({ ids: [], endCursor: null, hasNextPage: false })
  })

  it('an empty statuses list matches no run', async () => {
    expect(await page({ statuses: [] })).toEqual({ ids: [], endCursor: null, hasNextPage: false })
  })

  it('pages after a cursor do not move when runs are inserted before and after it', async () => {
    const filter: Filter = { scope: 'a' }
    const p1 = await page(filter, 100)
    const before = await expectedIds(filter, 100, 100)
    const [a] = defs as [DefinitionFixture]
    // 300 runs newer than every run, and 300 older than page 2's last run.
    await s.t.db.query(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, rehearsal, status)
       SELECT ?, ?, 'a', ? + INTERVAL seq SECOND, 1, 'scheduled' FROM seq_1_to_300`,
      [a.def.id, a.version.id, new Date(BASE)],
    )
    await s.t.db.query(
      `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, rehearsal, status)
       SELECT ?, ?, 'a', ? - INTERVAL seq * 7000 MICROSECOND, 1, 'scheduled' FROM seq_1_to_300`,
      [a.def.id, a.version.id, new Date(BASE - 200_000)],
    )
    const p2 = await page(filter, 100, p1.endCursor)
    expect(p2.ids).toEqual(before)
    // An offset would have shifted by the 300 newer runs.
    expect(await expectedIds(filter, 100, 100)).not.toEqual(before)
  })
})

/** The InnoDB handler reads of this session so far (index and row reads of every kind). */
async function handlerReads(): Promise<number> {
  const rows = await probe.query<{ Variable_name: string; Value: string }>(
    "SHOW SESSION STATUS LIKE 'Handler_read%'",
  )
  return rows.reduce((sum, r) => sum + Number(r.Value), 0)
}

/** Rows read by `fn` on the probe session, net of the counter query itself. */
async function rowsRead(fn: () => Promise<unknown>): Promise<number> {
  const a = await handlerReads()
  const b = await handlerReads()
  await fn()
  const c = await handlerReads()
  return c - b - (b - a)
}

describe('page N costs what page 1 costs (100,000 runs)', () => {
  it('the instrument sees a scan: an OFFSET to row 60,000 reads 60,000 rows', async () => {
    const n = await rowsRead(() =>
      probe.query('SELECT id FROM event_runs ORDER BY scheduled_for DESC, id DESC LIMIT 50 OFFSET 60000'),
    )
    expect(n).toBeGreaterThan(60_000)
  })

  it('for every filter shape, a page at depth ~60% reads about what the first page reads', async () => {
    const [a, b] = defs.map((d) => d.def.id) as [number, number]
    const shapes: { name: string; filter: RunPageFilter; oracle: Filter }[] = [
      { name: 'no filter', filter: {}, oracle: {} },
      { name: 'definition', filter: { definitionId: a }, oracle: { definitionId: String(a) } },
      {
        name: 'three statuses',
        filter: { statuses: ['completed', 'failed', 'paused'] },
        oracle: { statuses: ['completed', 'failed', 'paused'] },
      },
      {
        name: 'definition + two statuses',
        filter: { definitionId: b, statuses: ['completed', 'missed'] },
        oracle: { definitionId: String(b), statuses: ['completed', 'missed'] },
      },
      { name: 'scope', filter: { scope: 'b' }, oracle: { scope: 'b' } },
      { name: 'rehearsals', filter: { rehearsal: true }, oracle: { rehearsal: true } },
      {
        name: 'time window',
        filter: { scheduledBefore: new Date(BASE - 5_000_000) },
        oracle: { scheduledBefore: iso(BASE - 5_000_000) },
      },
    ]
    const first = 50
    const report: Record<string, Record<string, number>> = {}
    for (const shape of shapes) {
      const total = (await expectedIds(shape.oracle, 1_000_000)).length
      const depth = Math.floor(total * 0.6)
      const [cursorId] = await expectedIds(shape.oracle, 1, depth - 1)
      const [row] = await s.t.db.query<{ scheduled_for: Date }>(
        'SELECT scheduled_for FROM event_runs WHERE id = ?',
        [Number(cursorId)],
      )
      const cursor = { id: Number(cursorId), scheduledFor: row?.scheduled_for as Date }
      let deepPage: string[] = []
      // The range read alone (the page's keys, one more than asked) ...
      const keys1 = await rowsRead(() => pageKeys(probe, shape.filter, first + 1, null))
      const keysDeep = await rowsRead(() => pageKeys(probe, shape.filter, first + 1, cursor))
      // ... and the whole page (then its runs by key, with definition, version and waiting count).
      const page1 = await rowsRead(() => runPage(probe, shape.filter, first, null))
      const deep = await rowsRead(async () => {
        deepPage = (await runPage(probe, shape.filter, first, cursor)).runs.map((r) => String(r.id))
      })
      report[shape.name] = { keys1, keysDeep, page1, deep, depth }
      if (process.env.DEBUG_RUNPAGE) console.log(shape.name, report[shape.name])
      // The deep page is the right one ...
      expect(deepPage, shape.name).toEqual(await expectedIds(shape.oracle, first, depth))
      // ... its range read what page 1's did: one range per status branch, first + 1 keys each ...
      // A definition's runs with no status asked are a branch per status (migration 0021);
      // with no definition, scope or rehearsal asked either, the rehearsals and the rest (0022).
      const f = shape.filter
      const branches =
        f.statuses?.length ?? (f.definitionId != null ? 9 : f.scope == null && f.rehearsal == null ? 2 : 1)
      expect(keysDeep, shape.name).toBeLessThanOrEqual(keys1 + 2 * branches)
      // (several branches are merged through a temporary table: its rows are read once more)
      const merge = branches > 1 ? branches * (first + 3) + first + 10 : 0
      expect(keysDeep, shape.name).toBeLessThanOrEqual(branches * (first + 3) + merge)
      // ... and the whole page cost about what page 1 cost, nowhere near the depth. (Reads
      // by key of the same definition one after another are cached by the join, so a page
      // of one show's runs reads fewer rows than a page of mixed ones: hence the margin.)
      expect(deep, shape.name).toBeLessThanOrEqual(page1 + 2 * first + 20)
      expect(deep, shape.name).toBeLessThanOrEqual(branches * (first + 3) + merge + 6 * first + 50)
    }
    console.log('runPage handler reads (first 50):', JSON.stringify(report))
  })

  it('the cursor the API hands out is the position of the last run', async () => {
    const p1 = await page(null, 7)
    const [row] = await s.t.db.query<{ id: number; scheduled_for: Date }>(
      'SELECT id, scheduled_for FROM event_runs WHERE id = ?',
      [Number(p1.ids[6])],
    )
    expect(p1.endCursor).toBe(encodeCursor({ id: Number(row?.id), scheduledFor: row?.scheduled_for as Date }))
    expect(p1.endCursor).toMatch(/^[A-Za-z0-9_-]+$/)
  })
})

describe('runPage arguments', () => {
  it('first is clamped to 1..500', async () => {
    expect((await page(null, 0)).ids).toHaveLength(1)
    expect((await page(null, -40)).ids).toHaveLength(1)
    expect((await page(null, 100_000)).ids).toHaveLength(500)
    expect((await page(null, 500)).ids).toHaveLength(500)
  })

  it('a cursor this server did not hand out is BAD_USER_INPUT, saying what to pass', async () => {
    const good = (await page(null, 1)).endCursor as string
    const bad = [
      'not a cursor',
      'abc',
      '',
      'x'.repeat(5000),
      Buffer.from('r1:12:').toString('base64url'),
      Buffer.from('r2:1700000000000:5').toString('base64url'),
      Buffer.from('r1:1700000000000:0').toString('base64url'),
      Buffer.from('r1:99999999999999999:5').toString('base64url'),
      Buffer.from('{"id":5}').toString('base64url'),
      `${good}=`,
      `${good}!`,
      `${good}.`,
    ]
    for (const after of bad) {
      const e = await errorOf({ after })
      expect(e.code, after.slice(0, 40)).toBe('BAD_USER_INPUT')
      expect(e.message).toMatch(/after must be a pageInfo\.endCursor/)
    }
  })

  it('bad filter values are BAD_USER_INPUT or validation errors, never a server error', async () => {
    expect((await errorOf({ filter: { definitionId: 'seven' } })).code).toBe('BAD_USER_INPUT')
    expect((await errorOf({ filter: { scheduledAfter: 'yesterday' } })).code).toBe('BAD_USER_INPUT')
    expect((await errorOf({ filter: { scheduledBefore: '2030-01-01T00:00:00' } })).code).toBe(
      'BAD_USER_INPUT',
    )
    expect((await errorOf({ filter: { scope: 's'.repeat(500) } })).code).toBe('BAD_USER_INPUT')
    expect(['BAD_USER_INPUT', 'GRAPHQL_VALIDATION_FAILED']).toContain(
      (await errorOf({ filter: { statuses: ['NOPE'] } })).code,
    )
    // An unknown definition is simply no match.
    expect((await page({ definitionId: '987654321' })).ids).toEqual([])
  })

  it('a viewer may read; no token is UNAUTHENTICATED', async () => {
    expect((await page(null, 3)).ids).toHaveLength(3)
    const r = await s.gql('{ runPage { nodes { id } } }', { auth: null })
    expect(r.status).toBe(401)
    expect(r.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    expect(r.body.data ?? null).toBeNull()
  })
})
