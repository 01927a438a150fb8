/**
 * A `runChanges` subscriber never gets the same state twice in a row. The
 * feed finds changed runs, then reads them whole to hand them out; a run that
 * moves on between the two reads (answered and advanced in the same instant)
 * is handed out as read the second time, and the next poll must know that
 * state was already sent. A real database; the move is made by the test at
 * the exact moment between the feed's two reads.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SqlValue } from '../sql/db.ts'
import { RunChangeFeed } from '../src/api/runChangeFeed.ts'
import { NO_FILTER } from '../src/api/runFilter.ts'
import { createTestDb, type TestDb, wrapStatements } from './helpers/db.ts'
import { makeRun } from './helpers/fixtures.ts'

describe('runChanges, a run that moves on between the feed’s two reads', () => {
  let t: TestDb
  beforeAll(async () => {
    t = await createTestDb()
  })
  afterAll(async () => {
    await t?.drop()
  })

  it('is handed out once in its newest state, not again at the next poll', async () => {
    const run = await makeRun(t.db)
    const move = (status: string, phase: string) =>
      t.db.query('UPDATE event_runs SET status = ?, current_phase = ?, updated_at = NOW(3) WHERE id = ?', [
        status,
        phase,
        run.id,
      ] as SqlValue[])
    let moveBeforeNextWholeRead: (() => Promise<unknown>) | null = null
    const db = wrapStatements(t.db, 'query', (real) => async (sql, params) => {
      // The whole-run read of the changed runs (sql/eventRuns/read.ts getByIds).
      if (moveBeforeNextWholeRead && /WHERE r\.id IN \(/.test(sql)) {
        const moveNow = moveBeforeNextWholeRead
        moveBeforeNextWholeRead = null
        await moveNow()
      }
      return real(sql, params)
    })
    const feed = new RunChangeFeed({ db, intervalMs: 600_000 })
    const stream = await feed.watch(NO_FILTER)
    const iterator = stream[Symbol.asyncIterator]()
    const states: string[] = []
    const pulling = (async () => {
      for (;;) {
        const next = await iterator.next()
        if (next.done) return
        states.push(`${next.value.run.status}/${next.value.run.currentPhase}`)
      }
    })()
    const polled = async (n: number) => {
      const deadline = Date.now() + 10_000
      while (feed.polls < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      await new Promise((r) => setTimeout(r, 100)) // its deliveries pulled
    }
    try {
      await new Promise((r) => setTimeout(r, 50))
      const before = feed.polls
      // The feed finds the run RUNNING in "doors"; before it reads the run whole, the run moves to "show".
      await move('running', 'doors')
      moveBeforeNextWholeRead = () => move('running', 'show')
      feed.wake()
      await polled(before + 1)
      expect(states).toEqual(['running/show'])
      // The next poll finds the move to "show": already handed out, so nothing more.
      feed.wake()
      await polled(before + 2)
      expect(states).toEqual(['running/show'])
      // A real change after that is news again.
      await move('running', 'wrap-up')
      feed.wake()
      await polled(before + 3)
      expect(states).toEqual(['running/show', 'running/wrap-up'])
    } finally {
      await iterator.return?.()
      await feed.close()
      await pulling
    }
  }, 30_000)
})
