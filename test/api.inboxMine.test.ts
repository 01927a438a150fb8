/**
 * An inbox per owner: a `waitingSteps(mine: true)` subscriber does not wait
 * behind older cues of other people. With 1,500 older cues assigned to
 * someone else, everybody's inbox (limit 100) is their oldest 100 and never
 * shows a new cue; the owner's own inbox is empty at first, and the cue
 * assigned to it arrives in the first delivery after it parks, within a poll
 * or two (the limit applies after the owner filter, in the statement).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { makeDefinition, makeRunWithSteps } from './helpers/fixtures.ts'
import { startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const INBOX = `subscription ($limit: Int, $mine: Boolean) { waitingSteps(limit: $limit, mine: $mine) { id run { id } } }`
type InboxEvent = { waitingSteps: { id: string; run: { id: string } }[] }
const OTHERS = 1500
const INTERVAL = 100

/** Every column of `table` but `skip`, for INSERT … SELECT copies of a template row. */
async function columns(db: Db, table: string, skip: string[]): Promise<string[]> {
  const rows = await db.query<{ c: string }>(
    `SELECT COLUMN_NAME AS c FROM information_schema.COLUMNS
      WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND EXTRA NOT LIKE '%GENERATED%'
      ORDER BY ORDINAL_POSITION`,
    [table],
  )
  return rows.map((r) => r.c).filter((c) => !skip.includes(c))
}

describe('waitingSteps mine', () => {
  let s: TestServer
  /** Another instance's pool: its writes do not wake this server's feed, so only polls find them. */
  let elsewhere: Db
  let me = ''
  let myStepId = 0
  beforeAll(async () => {
    s = await startTestServer({ env: { STATUS_POLL_MS: String(INTERVAL) } })
    elsewhere = s.t.open()
    const who = await s.gql<{ viewer: { name: string } }>('{ viewer { name } }', { auth: 'operator' })
    me = who.body.data?.viewer.name as string
    expect(me).toBeTruthy()
    const fx = await makeDefinition(elsewhere)
    // A template run with two steps: the first is copied into 1,500 other runs
    // as a cue parked an hour ago (oldest first), the second becomes mine later.
    const { run, steps } = await makeRunWithSteps(elsewhere, 2, { definition: fx })
    myStepId = steps[1]?.id ?? 0
    const runCols = await columns(elsewhere, 'event_runs', ['id', 'scope'])
    await elsewhere.query(
      `INSERT INTO event_runs (scope, ${runCols.join(', ')})
       SELECT CONCAT('other-', q.seq), ${runCols.map((c) => `r.${c}`).join(', ')}
         FROM event_runs r JOIN seq_1_to_${OTHERS} q WHERE r.id = ?`,
      [run.id],
    )
    const stepCols = await columns(elsewhere, 'event_run_steps', [
      'id',
      'run_id',
      'status',
      'parked',
      'started_at',
      'updated_at',
    ])
    await elsewhere.query(
      `INSERT INTO event_run_steps (run_id, status, parked, started_at, updated_at, ${stepCols.join(', ')})
       SELECT r.id, 'running', 1, NOW(3) - INTERVAL 1 HOUR + INTERVAL r.id MICROSECOND, NOW(3),
              ${stepCols.map((c) => `t.${c}`).join(', ')}
         FROM event_runs r JOIN event_run_steps t ON t.id = ?
        WHERE r.scope LIKE 'other-%'`,
      [steps[0]?.id ?? 0],
    )
    await elsewhere.query(
      `INSERT INTO cue_ladders (step_id, run_id, prompt, opened_at, assignees)
       SELECT s.id, s.run_id, 'Not yours', s.started_at, JSON_ARRAY('somebody-else', 'team:elsewhere')
         FROM event_run_steps s WHERE s.parked = 1`,
    )
    const [{ n } = { n: 0 }] = await elsewhere.query<{ n: number }>(
      'SELECT COUNT(*) AS n FROM event_run_steps WHERE parked = 1',
    )
    expect(Number(n)).toBe(OTHERS)
  }, 60_000)
  // Closing took past the default 60 s twice under a full CI run (the test itself
  // had passed; alone it closes in milliseconds): cause not yet found, see the
  // closing note. A longer limit still fails a close that never ends.
  afterAll(async () => {
    await elsewhere?.close()
    await s?.close()
  }, 180_000)

  it("a new cue of mine reaches me in the first delivery after it parks, behind 1,500 older cues of others'", async () => {
    const client = wsClient(s, 'operator')
    const everybody = wsSubscribe<InboxEvent>(client, INBOX, { limit: 100, mine: false })
    const mine = wsSubscribe<InboxEvent>(client, INBOX, { limit: 100, mine: true })
    try {
      const first = await everybody.until((e) => Array.isArray(e.data?.waitingSteps))
      expect(first.data?.waitingSteps).toHaveLength(100)
      const empty = await mine.until((e) => Array.isArray(e.data?.waitingSteps))
      expect(empty.data?.waitingSteps).toEqual([])

      // My cue parks now, the youngest of 1,501, assigned to me.
      const polls0 = s.app.inbox.polls
      const delivered0 = mine.events.length
      await elsewhere.transaction(async (tx) => {
        await tx.query(
          `UPDATE event_run_steps SET status = 'running', parked = 1, started_at = NOW(3) WHERE id = ?`,
          [myStepId],
        )
        await tx.query(
          `INSERT INTO cue_ladders (step_id, run_id, prompt, opened_at, assignees)
           SELECT id, run_id, 'Yours', started_at, JSON_ARRAY(?) FROM event_run_steps WHERE id = ?`,
          [me, myStepId],
        )
      })
      const next = await mine.until((e) => mine.events.indexOf(e) >= delivered0, 5000)
      const polls = s.app.inbox.polls - polls0
      // The first delivery after it parked is exactly my cue: nothing to wait behind.
      expect(next.data?.waitingSteps.map((st) => st.id)).toEqual([String(myStepId)])
      // Found by the next poll (one may have been in flight when it committed).
      expect(polls).toBeLessThanOrEqual(2)
      // Everybody's oldest 100 do not change, so that inbox is not even re-sent.
      expect(everybody.events).toHaveLength(1)
    } finally {
      everybody.stop()
      mine.stop()
      await client.dispose()
    }
  }, 30_000)
})
