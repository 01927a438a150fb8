/**
 * `waitingStepChanges`: the cue inbox as changes. The first event is the whole
 * inbox (`reset`); later ones carry only the cues new to it or changed, and
 * the ids of those that left it, so a client that applies them holds the
 * same inbox a `waitingSteps` subscriber is sent whole. Cues are parked and
 * finished by another pool (as another instance's runner would), so only the
 * feed's polls find them. Ending a subscription ends its feed listener at
 * once, with no change to wait for.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { inboxChanges } from '../src/api/inboxChanges.ts'
import type { Inbox } from '../src/api/inboxFeed.ts'
import { makeDefinition, makeRunWithSteps } from './helpers/fixtures.ts'
import { eventually, startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const CHANGES = `subscription ($limit: Int) {
  waitingStepChanges(limit: $limit) { reset added { id startedAt run { id } } removed }
}`
const WHOLE = `subscription ($limit: Int) { waitingSteps(limit: $limit) { id } }`
type Change = {
  waitingStepChanges: {
    reset: boolean
    added: { id: string; startedAt: string; run: { id: string } }[]
    removed: string[]
  }
}
type Whole = { waitingSteps: { id: string }[] }
const INTERVAL = 100

describe('waitingStepChanges', () => {
  let s: TestServer
  /** Another instance's pool: its writes do not wake this server's feed. */
  let elsewhere: Db
  const cues: StepRow[] = []

  /** Park `step` as a cue waiting on a person, `minutesAgo` old. */
  const park = async (step: StepRow, minutesAgo: number) => {
    await elsewhere.transaction(async (tx) => {
      await tx.query(
        `UPDATE event_run_steps SET status = 'running', parked = 1,
                started_at = NOW(3) - INTERVAL ? MINUTE, updated_at = NOW(3) WHERE id = ?`,
        [minutesAgo, step.id],
      )
      await tx.query(
        `INSERT INTO cue_ladders (step_id, run_id, prompt, opened_at, assignees)
         SELECT id, run_id, 'Go?', started_at, JSON_ARRAY() FROM event_run_steps WHERE id = ?`,
        [step.id],
      )
    })
  }
  /** The cue is answered (elsewhere): it leaves every inbox. */
  const finish = (step: StepRow) =>
    elsewhere.query(
      `UPDATE event_run_steps SET status = 'completed', parked = 0, ended_at = NOW(3), updated_at = NOW(3) WHERE id = ?`,
      [step.id],
    )

  beforeAll(async () => {
    s = await startTestServer({ env: { STATUS_POLL_MS: String(INTERVAL) } })
    elsewhere = s.t.open()
    const fx = await makeDefinition(elsewhere)
    for (let i = 0; i < 4; i++) {
      const { steps } = await makeRunWithSteps(elsewhere, 1, { definition: fx })
      cues.push(steps[0] as StepRow)
    }
  }, 60_000)
  afterAll(async () => {
    await elsewhere?.close()
    await s?.close()
  })

  it('sends the whole inbox once, then only what changed; applied, the changes give the inbox waitingSteps sends whole', async () => {
    const [a, b, c, d] = cues as [StepRow, StepRow, StepRow, StepRow]
    await park(a, 40)
    await park(b, 30)
    await park(c, 20)
    const client = wsClient(s, 'viewer')
    const changes = wsSubscribe<Change>(client, CHANGES, { limit: 3 })
    const whole = wsSubscribe<Whole>(client, WHOLE, { limit: 3 })
    /** The inbox as a client of waitingStepChanges keeps it: by id, sorted oldest first. */
    const kept = new Map<string, string>()
    let applied = 0
    const apply = () => {
      for (const e of changes.events.slice(applied)) {
        const ch = e.data?.waitingStepChanges
        if (!ch) throw new Error(`an event without data: ${JSON.stringify(e)}`)
        if (ch.reset) kept.clear()
        for (const id of ch.removed) kept.delete(id)
        for (const st of ch.added) kept.set(st.id, st.startedAt)
      }
      applied = changes.events.length
      return [...kept].sort((x, y) => x[1].localeCompare(y[1])).map(([id]) => id)
    }
    const ids = (...steps: StepRow[]) => steps.map((st) => String(st.id))
    const lastWhole = () => (whole.events.at(-1)?.data?.waitingSteps ?? []).map((st) => st.id)
    try {
      const first = await changes.until((e) => e.data?.waitingStepChanges !== undefined)
      expect(first.data?.waitingStepChanges).toMatchObject({ reset: true, removed: [] })
      expect(first.data?.waitingStepChanges.added.map((st) => st.id)).toEqual(ids(a, b, c))
      expect(first.data?.waitingStepChanges.added[0]?.run.id).toBeTruthy()
      expect(apply()).toEqual(ids(a, b, c))

      // A newer cue parks: the inbox (limit 3) is full of older ones, so nothing is sent yet.
      await park(d, 10)
      // The oldest is answered: it leaves, and the newer one comes into the first 3.
      await finish(a)
      const next = await changes.until((e) => changes.events.indexOf(e) >= 1, 5000)
      expect(next.data?.waitingStepChanges).toEqual({
        reset: false,
        added: [expect.objectContaining({ id: String(d.id) })],
        removed: [String(a.id)],
      })
      expect(apply()).toEqual(ids(b, c, d))

      // Two answered at once: one event removing both, adding nothing.
      await Promise.all([finish(b), finish(d)])
      await eventually(async () => (apply().length === 1 ? true : null), 5000)
      expect(apply()).toEqual(ids(c))
      for (const e of changes.events.slice(1)) expect(e.data?.waitingStepChanges.reset).toBe(false)
      // Nothing but what changed was ever sent after the first event.
      const sentAfterFirst = changes.events.slice(1).flatMap((e) => e.data?.waitingStepChanges.added ?? [])
      expect(sentAfterFirst.map((st) => st.id)).toEqual(ids(d))

      // The whole inbox, sent whole, agrees.
      await eventually(async () => (lastWhole().length === 1 ? true : null), 5000)
      expect(lastWhole()).toEqual(apply())
    } finally {
      changes.stop()
      whole.stop()
      await client.dispose()
    }
  }, 30_000)

  it('a cue that changes while it waits is sent again, to replace it; an ended subscription leaves the feed at once', async () => {
    const { steps } = await makeRunWithSteps(elsewhere, 1)
    const c = steps[0] as StepRow
    await park(c, 5)
    const listenersBefore = s.app.inbox.listenerCount
    const client = wsClient(s, 'viewer')
    const changes = wsSubscribe<Change>(client, CHANGES, { limit: 10 })
    try {
      const first = await changes.until((e) => e.data?.waitingStepChanges !== undefined)
      expect(first.data?.waitingStepChanges.added.map((st) => st.id)).toContain(String(c.id))
      await eventually(async () => (s.app.inbox.listenerCount === listenersBefore + 1 ? true : null), 5000)
      // Its row changes (a ladder rung, say): the same cue again, nothing removed.
      await elsewhere.query(
        'UPDATE event_run_steps SET updated_at = NOW(3) + INTERVAL 1 SECOND WHERE id = ?',
        [c.id],
      )
      const again = await changes.until((e) => changes.events.indexOf(e) >= 1, 5000)
      expect(again.data?.waitingStepChanges).toEqual({
        reset: false,
        added: [expect.objectContaining({ id: String(c.id) })],
        removed: [],
      })
    } finally {
      changes.stop()
    }
    // Nothing changes in the inbox from here: the listener must go without waiting for a change.
    await eventually(async () => (s.app.inbox.listenerCount === listenersBefore ? true : null), 2000)
    await client.dispose()
  }, 30_000)

  it('clamps limit to 1..500, and refuses a limit that is not a number', async () => {
    const client = wsClient(s, 'viewer')
    const tiny = wsSubscribe<Change>(client, CHANGES, { limit: -5 })
    const bad = wsSubscribe<Change>(client, CHANGES, { limit: 'many' })
    try {
      const first = await tiny.until((e) => e.data?.waitingStepChanges !== undefined)
      expect(first.data?.waitingStepChanges.added.length).toBe(1)
      await bad.done
      expect(bad.events).toHaveLength(1)
      expect(bad.events[0]?.data ?? null).toBeNull()
      expect(bad.events[0]?.errors?.[0]?.message).toMatch(/\$limit.*Int/)
    } finally {
      tiny.stop()
      bad.stop()
      await client.dispose()
    }
  })

  it('needs a credential, like waitingSteps', async () => {
    const closes: number[] = []
    const client = wsClient(s, null, (e) => closes.push(e.code))
    const changes = wsSubscribe<Change>(client, CHANGES, { limit: 3 })
    await expect(changes.done).rejects.toBeTruthy()
    expect(closes).toContain(4401)
    await client.dispose()
  })
})

describe('inboxChanges (the iterator)', () => {
  it('ends at once while it waits for the next inbox, and ends the feed’s stream with it', async () => {
    let innerEnded = false
    const never: AsyncIterableIterator<Inbox> = {
      next: () => new Promise<IteratorResult<Inbox>>(() => {}),
      return: async () => {
        innerEnded = true
        return { done: true, value: undefined }
      },
      [Symbol.asyncIterator]() {
        return never
      },
    }
    const changes = inboxChanges(never)
    const pending = changes.next()
    const ended = await Promise.race([
      changes.return?.().then(() => 'ended'),
      new Promise((resolve) => setTimeout(() => resolve('still waiting'), 500)),
    ])
    expect(ended).toBe('ended')
    expect(innerEnded).toBe(true)
    void pending
  })
})
