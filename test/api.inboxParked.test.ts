/**
 * Cues this process's runner parks are pushed to the inboxes
 * (`InboxFeed.parked`): read by id the moment the park is written, added to
 * every inbox they belong in, with no poll (no read of which cues wait for
 * everybody, no wait for the least gap between polls). What a push must not
 * do: show a cue to someone it is not for, show a cue answered meanwhile,
 * push a cue into an inbox already at its limit, or be undone by a poll that
 * read the cues before the push and delivers after it.
 */
import { beforeEach, expect, it } from 'vitest'
import type { Db, Queryable } from '../sql/db.ts'
import { type Inbox, InboxFeed } from '../src/api/inboxFeed.ts'
import { useTestDb, wrapStatements } from './helpers/db.ts'
import { parkCue } from './helpers/fixtures.ts'
import { waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()

// Each test starts with no cue waiting (a cue for anyone is in everybody's inbox).
beforeEach(async () => {
  await t.db.query(
    `UPDATE event_run_steps SET status = 'completed', ended_at = NOW(3) WHERE status = 'running'`,
  )
})

/** Every inbox a stream delivers, in order, each as its cues' ids. */
function record(stream: AsyncIterableIterator<Inbox>): { seen: number[][]; done: Promise<void> } {
  const seen: number[][] = []
  const done = (async () => {
    for await (const inbox of stream) seen.push(inbox.steps.map((s) => s.id))
  })()
  return { seen, done }
}

/** The last inbox a recorder saw, once it has seen `n`. */
async function nth(rec: { seen: number[][] }, n: number): Promise<number[]> {
  await waitFor(() => rec.seen.length >= n || null, { what: `inbox ${n}` })
  return rec.seen[n - 1] as number[]
}

it('a parked cue reaches every inbox it belongs in, read by id, without a poll', async () => {
  const feed = new InboxFeed({ db: t.db, intervalMs: 60_000 })
  const ann = record(await feed.watch(500, ['ann', 'team:lights']))
  const bob = record(await feed.watch(500, ['bob']))
  const everybody = record(await feed.watch(500))
  try {
    for (const rec of [ann, bob, everybody]) expect(await nth(rec, 1)).toEqual([])
    const forAnn = await parkCue(t.db, 'ann')
    const forTeam = await parkCue(t.db, 'team:lights')
    const forAnyone = await parkCue(t.db, null)
    const polls = feed.polls
    const statements = t.db.stats.statements
    feed.parked([forAnn.id, forTeam.id, forAnyone.id])

    expect(await nth(ann, 2)).toEqual([forAnn.id, forTeam.id, forAnyone.id])
    expect(await nth(everybody, 2)).toEqual([forAnn.id, forTeam.id, forAnyone.id])
    expect(await nth(bob, 2)).toEqual([forAnyone.id])
    expect(feed.polls).toBe(polls)
    expect(feed.pushes).toBe(1)
    // The cues with whom each is for, their runs, the runs' waiting counts.
    expect(t.db.stats.statements - statements).toBeLessThanOrEqual(3)

    // A later push adds to what each inbox was sent, and reaches only the inboxes it belongs in.
    const second = await parkCue(t.db, 'bob')
    feed.parked([second.id])
    expect(await nth(bob, 3)).toEqual([forAnyone.id, second.id])
    expect(await nth(everybody, 3)).toEqual([forAnn.id, forTeam.id, forAnyone.id, second.id])
    expect(ann.seen).toHaveLength(2)
  } finally {
    await feed.close()
    await Promise.all([ann.done, bob.done, everybody.done])
  }
})

it('a cue answered before its push is not shown; an inbox at its limit is left to the polls', async () => {
  const feed = new InboxFeed({ db: t.db, intervalMs: 60_000 })
  const kept = await parkCue(t.db, 'cy')
  const short = record(await feed.watch(1, ['cy']))
  const roomy = record(await feed.watch(500, ['cy']))
  try {
    expect(await nth(short, 1)).toEqual([kept.id])
    expect(await nth(roomy, 1)).toEqual([kept.id])
    const answered = await parkCue(t.db, 'cy')
    await t.db.query(`UPDATE event_run_steps SET status = 'completed', ended_at = NOW(3) WHERE id = ?`, [
      answered.id,
    ])
    feed.parked([answered.id])
    const later = await parkCue(t.db, 'cy')
    feed.parked([later.id])
    // Pushes go in order: had the answered cue been shown, it would be here first.
    expect(await nth(roomy, 2)).toEqual([kept.id, later.id])
    expect(roomy.seen).toHaveLength(2)
    // The short inbox was full: its first cue still waits, so nothing newer enters it.
    expect(short.seen).toEqual([[kept.id]])
  } finally {
    await feed.close()
    await Promise.all([short.done, roomy.done])
  }
})

/**
 * `db` whose connections hold each read of the waiting cues, after it has
 * read them, while `held()` answers a promise: a poll that has read its cues
 * and not yet delivered them.
 */
function holdingWaitingReads(db: Db, held: () => Promise<void> | null): Db {
  const holding = (tx: Queryable) =>
    wrapStatements(tx, 'query', (real) => async (sql, params) => {
      const rows = await real(sql, params)
      const gate = held()
      if (gate && sql.includes('idx_evstep_waiting_since')) await gate
      return rows
    })
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'withConnection') {
        return <T>(work: (tx: Queryable) => Promise<T>) => target.withConnection((tx) => work(holding(tx)))
      }
      const value = Reflect.get(target, prop, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

it('a push waits for the poll in flight, so no poll takes a pushed cue out again', async () => {
  let release: () => void = () => {}
  let gate: Promise<void> | null = null
  const feed = new InboxFeed({
    db: t.db,
    pollDb: holdingWaitingReads(t.db, () => gate),
    intervalMs: 60_000,
  })
  const dee = record(await feed.watch(500, ['dee']))
  try {
    const first = await nth(dee, 1)
    gate = new Promise<void>((resolve) => {
      release = resolve
    })
    const polls = feed.polls
    feed.wake()
    // The poll has read the cues (without the one parked next) and is held before delivering.
    await waitFor(() => feed.polls > polls || null)
    await new Promise((r) => setTimeout(r, 100))
    const cue = await parkCue(t.db, 'dee')
    feed.parked([cue.id])
    // Time for a push that did not wait its turn to deliver.
    await new Promise((r) => setTimeout(r, 300))
    gate = null
    release()
    expect(await nth(dee, 2)).toEqual([...first, cue.id])
    await new Promise((r) => setTimeout(r, 200))
    // Once shown, the cue never left the inbox.
    for (const inbox of dee.seen.slice(1)) expect(inbox).toContain(cue.id)
  } finally {
    release()
    await feed.close()
    await dee.done
  }
})
