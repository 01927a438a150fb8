/**
 * The pause/complete race end to end: a server with its runner, a run whose
 * last step is a webhook in flight, and `pauseRun` (or `cancelRun`) sent over
 * HTTP at a random instant around that step's end, many times. The answer and
 * the run's end must agree every time:
 * - pause `applied: true` → the run is PAUSED once the step in flight has
 *   ended, stays PAUSED, and completes when resumed;
 * - pause `applied: false` → the run completes;
 * - cancel `applied: true` → CANCELLED; `applied: false` → COMPLETED.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually, sleep, startTestServer, type TestServer } from './helpers/server.ts'

/** How long the receiver holds each webhook before it answers. */
const HOLD_MS = 40
const PAUSES = 60
const CANCELS = 30
/** Rounds raced at once. */
const AT_ONCE = 10

let s: TestServer
let receiver: Server
/** Called when the webhook of the run with this scope arrives (before it is answered). */
const arrivals = new Map<string, () => void>()

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const scope = new URL(req.url ?? '/', 'http://x').searchParams.get('scope') ?? ''
    req.resume()
    req.on('end', () => {
      arrivals.get(scope)?.()
      setTimeout(() => res.end('ok'), HOLD_MS)
    })
  })
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r))
  const origin = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${origin}/` } })
  const created = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($p: JSON!) { createDefinition(input: { slug: "race", title: "Race", program: $p }) { id } }',
    {
      variables: {
        p: {
          phases: [
            {
              name: 'main',
              steps: [
                { kind: 'core.log', params: { message: 'first' } },
                {
                  kind: 'core.webhook',
                  retry: { attempts: 1 },
                  params: { url: `${origin}/hold?scope={{run.scope}}`, method: 'POST', body: { x: 1 } },
                },
              ],
            },
          ],
        },
      },
    },
  )
  defId = created.body.data?.createDefinition.id as string
  expect(defId).toBeTruthy()
})
afterAll(async () => {
  await s?.close()
  receiver?.closeAllConnections()
  await new Promise((r) => receiver?.close(r))
})
let defId = ''

interface RunState {
  status: string
  steps: { status: string }[]
}

async function stateOf(runId: string): Promise<RunState> {
  const r = await s.gql<{ run: RunState }>(`{ run(id: "${runId}") { status steps { status } } }`, {
    auth: 'viewer',
  })
  return r.body.data?.run as RunState
}

type Outcome = { scope: string; applied: boolean; before: boolean; agrees: boolean; end: string }

/** One round: start, wait for the webhook to arrive, send the control at a random instant around its answer. */
async function round(what: 'pause' | 'cancel', scope: string): Promise<Outcome> {
  const arrived = new Promise<void>((resolve) => arrivals.set(scope, resolve))
  const started = await s.gql<{ startRun: { id: string } }>(
    `mutation { startRun(definitionId: "${defId}", scope: "${scope}") { id } }`,
    { auth: 'operator' },
  )
  const runId = started.body.data?.startRun.id as string
  expect(runId, JSON.stringify(started.body)).toBeTruthy()
  await arrived
  arrivals.delete(scope)
  // From just after the webhook arrived to well after it was answered.
  const offset = Math.floor(Math.random() * HOLD_MS * 1.5)
  await sleep(offset)
  const answer = await s.gql<{ [k: string]: { applied: boolean } }>(
    `mutation { ${what}Run(id: "${runId}") { applied } }`,
    { auth: 'operator' },
  )
  const applied = answer.body.data?.[`${what}Run`]?.applied
  expect(typeof applied, JSON.stringify(answer.body)).toBe('boolean')
  // Settled: terminal, or paused with its step no longer in flight, and still so a few ticks later.
  const settled = await eventually(async () => {
    const st = await stateOf(runId)
    if (st.status === 'PAUSED' && st.steps.some((x) => x.status === 'RUNNING')) return null
    return ['COMPLETED', 'CANCELLED', 'FAILED', 'PAUSED'].includes(st.status) ? st : null
  }, 10_000)
  await sleep(200)
  const end = await stateOf(runId)
  let agrees: boolean
  if (what === 'cancel') agrees = end.status === (applied ? 'CANCELLED' : 'COMPLETED')
  else if (!applied) agrees = end.status === 'COMPLETED'
  else {
    agrees = settled.status === 'PAUSED' && end.status === 'PAUSED'
    const resumed = await s.gql<{ resumeRun: { applied: boolean } }>(
      `mutation { resumeRun(id: "${runId}") { applied } }`,
      { auth: 'operator' },
    )
    agrees &&= resumed.body.data?.resumeRun.applied === true
    const done = await eventually(async () => {
      const st = await stateOf(runId)
      return st.status === 'COMPLETED' ? st : null
    }, 10_000)
    agrees &&= done.steps.every((x) => x.status === 'COMPLETED')
  }
  return {
    scope,
    applied: applied as boolean,
    // The pause held a run whose every step had finished: it landed while the last was in flight.
    before: end.steps.every((x) => x.status === 'COMPLETED'),
    agrees,
    end: end.status,
  }
}

async function race(what: 'pause' | 'cancel', rounds: number): Promise<Outcome[]> {
  const out: Outcome[] = []
  for (let i = 0; i < rounds; i += AT_ONCE) {
    const batch = Array.from({ length: Math.min(AT_ONCE, rounds - i) }, (_, j) =>
      round(what, `${what}-${i + j}`),
    )
    out.push(...(await Promise.all(batch)))
  }
  return out
}

describe('a control raced against the last step, over HTTP with the runner', () => {
  it(`${PAUSES} pauses: applied means PAUSED (then COMPLETED on resume), not applied means COMPLETED`, async () => {
    const out = await race('pause', PAUSES)
    const tally = {
      applied: out.filter((o) => o.applied).length,
      appliedWithEveryStepDone: out.filter((o) => o.applied && o.before).length,
      notApplied: out.filter((o) => !o.applied).length,
    }
    console.log('[pauseRace] pauses:', tally)
    expect(out.filter((o) => !o.agrees)).toEqual([])
    // Both sides of the race were reached, and the pause landed on the step in flight at least once.
    expect(tally.applied).toBeGreaterThan(0)
    expect(tally.notApplied).toBeGreaterThan(0)
    expect(tally.appliedWithEveryStepDone).toBeGreaterThan(0)
  }, 180_000)

  it(`${CANCELS} cancels: applied means CANCELLED, not applied means COMPLETED`, async () => {
    const out = await race('cancel', CANCELS)
    console.log('[pauseRace] cancels:', {
      applied: out.filter((o) => o.applied).length,
      notApplied: out.filter((o) => !o.applied).length,
    })
    expect(out.filter((o) => !o.agrees)).toEqual([])
    expect(out.some((o) => o.applied)).toBe(true)
    expect(out.some((o) => !o.applied)).toBe(true)
  }, 180_000)
})
