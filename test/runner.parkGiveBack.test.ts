/**
 * A run parked on a person is given back by the write that parks its cue:
 * the moment the cue can be seen (its owner's inbox told), the run is free,
 * so a GO that comes at once is handed to the runner (handOff.ts) instead of
 * finding the run still held and going the long way (a wake, a nudge, the
 * lane's lease). Until then the give-back was a statement of its own after
 * the park's, and a fast answer landed in between.
 */
import { afterEach, expect, it } from 'vitest'
import type { Db } from '../sql/db.ts'
import { resolveCueAs } from '../src/operations/cueAnswers.ts'
import { systemClock } from '../src/runner/clock.ts'
import { BufferedWriter, type GivenBack } from '../src/runner/executor/writer.ts'
import { HeldClaims } from '../src/runner/held.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'
import { makeRun } from './helpers/fixtures.ts'
import { cueShow, parkedShows, stepsOf, waitFor } from './helpers/runnerHarness.ts'

const t = useTestDb()
let runner: Runner | undefined
afterEach(async () => {
  await runner?.stop()
  runner = undefined
})

const person = { name: 'operator', teams: [], admin: false }

/** A release of claims sent on its own (not in a one-text transaction). */
const isLoneRelease = (sql: string) => /claimed_by = NULL/.test(sql) && /woken_while_claimed = 0/.test(sql)

/**
 * `db` whose releases sent on their own are held back `ms`: were the park's
 * give-back such a statement, a reader told of the park would find the run
 * still claimed. One-text transactions (`commitAll`) go through untouched.
 */
function slowLoneReleases(db: Db, ms: number): Db {
  return new Proxy(db, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver)
      if (prop !== 'runQuery' && prop !== 'run')
        return typeof value === 'function' ? value.bind(target) : value
      return async (sql: string, params?: readonly unknown[]) => {
        if (isLoneRelease(sql)) await new Promise((r) => setTimeout(r, ms))
        return (value as (s: string, p?: readonly unknown[]) => Promise<unknown>).call(target, sql, params)
      }
    },
  })
}

async function claimOf(runId: number): Promise<{ claimed_by: string | null; wake_at: Date | null }> {
  const [row] = await t.db.query<{ claimed_by: string | null; wake_at: Date | null }>(
    'SELECT claimed_by, wake_at FROM event_runs WHERE id = ?',
    [runId],
  )
  return row as { claimed_by: string | null; wake_at: Date | null }
}

it('a GO sent the moment its cue is parked is handed to the runner: the park gave the run back', async () => {
  const show = await cueShow(t.db)
  const runId = (await makeRun(t.db, { definition: show, scheduledFor: new Date() })).id
  // Set by the first cue parked (closures: a holder, so the types are not narrowed to null).
  const atPark: { answer?: Promise<{ applied: boolean }>; claim?: Promise<{ claimed_by: string | null }> } =
    {}
  const started = new Runner({
    db: slowLoneReleases(t.db, 500),
    registry: createDefaultRegistry(),
    clock: systemClock,
    tickMs: 60_000,
    observer: {
      cuesParked: () => {
        if (atPark.answer) return
        atPark.claim = claimOf(runId)
        atPark.answer = (async () => {
          const [cue] = await stepsOf(t.db, runId)
          return resolveCueAs(
            { db: t.db, clock: systemClock, nudge: () => started.nudge(), handOff: started.lane },
            (cue as { id: number }).id,
            person,
            'go',
            'api',
          )
        })()
      },
    },
  })
  runner = started
  started.start()
  await waitFor(async () => atPark.answer ?? null, { timeoutMs: 10_000 })
  // Read as the inbox is told: nobody holds the run any more.
  expect((await atPark.claim)?.claimed_by).toBeNull()
  expect((await atPark.answer)?.applied).toBe(true)
  // Taken by the answer for this runner, not woken for the next lease.
  expect(started.lane.adoptedRuns).toBe(1)
  await waitFor(async () => (await stepsOf(t.db, runId)).every((st) => st.status === 'completed') || null, {
    timeoutMs: 10_000,
  })
})

it("the park's write gives back only the claim it was given: not one lost, nor one taken since", async () => {
  const ids = (await parkedShows(t.db, 3)).runIds
  const [kept, lost, since] = ids as [number, number, number]
  // Each run held again by 'me' under the token 'tok', as while its runner parks it.
  await t.db.run(
    `UPDATE event_runs SET claimed_by = 'me', claim_token = 'tok',
            claim_expires_at = NOW(3) + INTERVAL 30 SECOND, wake_at = NOW(3) + INTERVAL 30 SECOND
      WHERE id IN (?, ?, ?)`,
    ids,
  )
  // Lost: another instance took it after the lease ran out. Since: a GO's hand-over to this same instance.
  await t.db.run("UPDATE event_runs SET claimed_by = 'other', claim_token = 'x' WHERE id = ?", [lost])
  await t.db.run("UPDATE event_runs SET claim_token = 'answer' WHERE id = ?", [since])

  const told: string[] = []
  let givenBack: readonly GivenBack[] = []
  const writer = new BufferedWriter(t.db, new AbortController().signal, {
    givenBack: (given) => {
      told.push('givenBack')
      givenBack = given
    },
    parked: () => told.push('parked'),
  })
  const timeout = new Date(Date.now() + 600_000)
  for (const id of ids) {
    const [cue] = await stepsOf(t.db, id)
    writer.setAsideStep((cue as { id: number }).id, id === kept ? timeout : null, true)
    writer.giveBack({ id, claimToken: 'tok' }, 'me', id === kept ? timeout : null)
  }
  const before = { ...t.db.stats }
  await writer.flush()
  expect(t.db.stats.roundTrips - before.roundTrips).toBe(1)
  // The claims are let go before the inbox hears of the cues.
  expect(told).toEqual(['givenBack', 'parked'])
  expect(givenBack.map((g) => g.id).sort()).toEqual([...ids].sort())

  const keptNow = await claimOf(kept)
  expect(keptNow.claimed_by).toBeNull()
  // Due at its cue's timeout, as the runner planned it.
  expect(Math.abs((keptNow.wake_at?.getTime() ?? 0) - timeout.getTime())).toBeLessThan(1000)
  expect((await claimOf(lost)).claimed_by).toBe('other')
  expect((await claimOf(since)).claimed_by).toBe('me')
  for (const id of ids)
    expect((await stepsOf(t.db, id))[0]).toMatchObject({ status: 'running', parked: true })
})

it('a park given back after a nudge while it was held wakes the lane; without one it does not', async () => {
  let nudges = 0
  let wakes = 0
  const released: Date[][] = []
  const claims = new HeldClaims({
    db: t.db,
    owner: 'me',
    clock: systemClock,
    logger: { info() {}, warn() {}, error() {}, debug() {} } as never,
    retryAfterMs: 1000,
    released: (at) => released.push([...at]),
    nudged: { count: () => nudges, wake: () => wakes++ },
  })
  claims.hold([{ id: 1 }, { id: 2 }, { id: 3 }])
  const timeout = new Date(Date.now() + 60_000)
  claims.answer(1, { wakeAt: timeout, givenBack: true })
  expect(wakes).toBe(0)
  // Its timeout is where the runner aims its sleep, as a release would tell it.
  expect(released).toEqual([[timeout]])
  // A GO landed between the cue's entry and its park's commit: its wake was kept, the lane must look.
  nudges++
  claims.answer(2, { wakeAt: null, givenBack: true })
  expect(wakes).toBe(1)
  expect(claims.holding).toEqual([3])
  // A run given back is not given back again at the end of the pass.
  await claims.giveBack()
  expect(claims.holding).toEqual([])
})
