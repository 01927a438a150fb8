/**
 * retryStepNow over HTTP, with the runner and a real receiver that fails its
 * first call and answers the next: a webhook step in a ten-minute backoff is
 * retried at once (the receiver sees the second call, with the same
 * Idempotency-Key, seconds later, not ten minutes), the run completes, and
 * the retry is in the run's log and the audit table. Refusals: a malformed or
 * unknown id, a step not in backoff (done, or parked on a person), a paused
 * run, a viewer (FORBIDDEN), no token and an expired key (401); none of them
 * moves the step.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver, waitFor } from './helpers/runnerHarness.ts'
import { type Auth, sleep, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let receiver: WebhookReceiver

beforeAll(async () => {
  receiver = await startReceiver()
  // Fails the first call of each idempotency key, answers every later one.
  receiver.route('/hooks/flaky', (_call, nth) => (nth === 1 ? { status: 503, body: 'warming up' } : {}))
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } })
})
afterAll(async () => {
  await s?.close()
  await receiver?.close()
})

interface Step {
  id: string
  status: string
  attempts: number
  wakeAt: string | null
  lastError: string | null
}
const STEP_FIELDS = 'id status attempts wakeAt lastError'

async function data<T>(query: string, variables?: Record<string, unknown>, auth: Auth = 'admin'): Promise<T> {
  const res = await s.gql<T>(query, { variables, auth })
  expect(res.body.errors).toBeUndefined()
  return res.body.data as T
}

async function runWith(steps: unknown[]): Promise<string> {
  const made = await data<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    {
      input: {
        slug: unique('retry-now'),
        title: 'Retry now',
        program: { phases: [{ name: 'main', steps }] },
      },
    },
  )
  const run = await data<{ startRun: { id: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    { d: made.createDefinition.id },
  )
  return run.startRun.id
}

async function stepsOf(runId: string): Promise<{ status: string; steps: Step[] }> {
  const d = await data<{ run: { status: string; steps: Step[] } }>(
    `query ($id: ID!) { run(id: $id) { status steps { ${STEP_FIELDS} } } }`,
    { id: runId },
  )
  return d.run
}

const FLAKY = () => ({
  kind: 'core.webhook',
  params: { url: `${receiver.url}/hooks/flaky` },
  retry: { attempts: 5, backoffSeconds: 600 },
})

/** A run whose webhook (its first step) failed once and now waits ten minutes for its next attempt. */
async function inBackoff(extra: unknown[] = []): Promise<{ runId: string; step: Step }> {
  const runId = await runWith([FLAKY(), ...extra])
  const step = await waitFor(
    async () => {
      const st = (await stepsOf(runId)).steps[0]
      return st?.status === 'PENDING' && st.attempts === 1 && st.wakeAt ? st : null
    },
    { timeoutMs: 15_000, what: 'the webhook to fail once and back off' },
  )
  return { runId, step }
}

function retryNow(stepId: string, auth: Auth = 'operator') {
  return s.gql<{ retryStepNow: { applied: boolean; step: Step } }>(
    `mutation ($id: ID!) { retryStepNow(stepId: $id) { applied step { ${STEP_FIELDS} } } }`,
    { variables: { id: stepId }, auth },
  )
}

describe('retryStepNow', () => {
  it('makes the next attempt of a step in backoff now; the run goes on long before the backoff would end', async () => {
    const { runId, step } = await inBackoff([{ kind: 'core.log', params: { message: 'after the hook' } }])
    expect(Date.parse(step.wakeAt as string) - Date.now()).toBeGreaterThan(5 * 60_000)
    expect(step.lastError).toMatch(/503/)
    const asked = Date.now()
    const res = await retryNow(step.id)
    expect(res.body.errors).toBeUndefined()
    expect(res.body.data?.retryStepNow.applied).toBe(true)
    const done = await waitFor(
      async () => {
        const r = await stepsOf(runId)
        return r.status === 'COMPLETED' ? r : null
      },
      { timeoutMs: 15_000, what: 'the run to complete after the retry' },
    )
    expect(Date.now() - asked).toBeLessThan(15_000)
    expect(done.steps.map((st) => st.status)).toEqual(['COMPLETED', 'COMPLETED'])
    // One more attempt, counted, on the runner's own path: the same idempotency key, called twice.
    expect(done.steps[0]?.attempts).toBe(2)
    const keys = receiver.calls.filter((c) => c.path === '/hooks/flaky' && c.key?.startsWith(`${runId}-`))
    expect(keys).toHaveLength(2)
    expect(new Set(keys.map((c) => c.key)).size).toBe(1)

    const logs = await data<{ run: { logs: { message: string; actor: string | null }[] } }>(
      'query ($id: ID!) { run(id: $id) { logs(limit: 50) { message actor } } }',
      { id: runId },
    )
    expect(logs.run.logs.map((l) => l.message)).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^retry step now ${step.id} \\(step 1 of the run, core.webhook\\) by \\S+: attempt 2 of 5 now$`,
        ),
      ),
    )
    const audit = await s.t.db.query<{ outcome: string; actor: string }>(
      `SELECT outcome, actor FROM audit_log WHERE action = 'retryStepNow' AND target_id = ?`,
      [step.id],
    )
    expect(audit.map((a) => a.outcome)).toEqual(['ok'])

    // Done now: a second press is refused, saying why.
    const again = await retryNow(step.id)
    expect(again.body.errors?.[0]?.extensions).toMatchObject({ code: 'CONFLICT', reason: 'NOT_IN_BACKOFF' })
    expect(again.body.errors?.[0]?.message).toMatch(/is COMPLETED, not waiting for a retry/)
  })

  it('refuses a malformed or unknown id, and a cue parked on a person', async () => {
    const bad = await retryNow('not-an-id')
    expect(bad.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    const unknown = await retryNow('987654321')
    expect(unknown.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
    expect(unknown.body.errors?.[0]?.message).toMatch(/No step with id "987654321"/)

    const runId = await runWith([{ kind: 'core.cue', params: { prompt: 'go?' } }])
    const cue = await waitFor(
      async () => {
        const d = await data<{ run: { steps: { id: string; parked: boolean }[] } }>(
          'query ($id: ID!) { run(id: $id) { steps { id parked } } }',
          { id: runId },
        )
        return d.run.steps[0]?.parked ? d.run.steps[0] : null
      },
      { timeoutMs: 15_000, what: 'the cue to park' },
    )
    const res = await retryNow(cue.id)
    expect(res.body.errors?.[0]?.extensions).toMatchObject({ code: 'CONFLICT', reason: 'NOT_IN_BACKOFF' })
    expect(res.body.errors?.[0]?.message).toMatch(/RUNNING, parked on a person/)
    expect((await stepsOf(runId)).steps[0]?.status).toBe('RUNNING')
  })

  it('refuses a step of a paused run (resume first), and the step keeps its backoff', async () => {
    const { runId, step } = await inBackoff()
    const paused = await data<{ pauseRun: { applied: boolean } }>(
      'mutation ($id: ID!) { pauseRun(id: $id) { applied } }',
      { id: runId },
    )
    expect(paused.pauseRun.applied).toBe(true)
    const res = await retryNow(step.id)
    expect(res.body.errors?.[0]?.extensions).toMatchObject({ code: 'CONFLICT', reason: 'RUN_NOT_RUNNING' })
    expect(res.body.errors?.[0]?.message).toMatch(/is PAUSED; resume it first/)
    const [row] = await s.t.db.query<{ wake_at: Date; attempts: number }>(
      'SELECT wake_at, attempts FROM event_run_steps WHERE id = ?',
      [step.id],
    )
    expect(row?.wake_at.getTime()).toBe(Date.parse(step.wakeAt as string))
    const refused = await s.t.db.query<{ outcome: string }>(
      `SELECT outcome FROM audit_log WHERE action = 'retryStepNow' AND target_id = ?`,
      [step.id],
    )
    expect(refused.map((a) => a.outcome)).toEqual(['refused'])
  })

  it('is for operators: a viewer is FORBIDDEN, no token or an expired key is refused, and nothing moves', async () => {
    const { runId, step } = await inBackoff()
    const viewer = await retryNow(step.id, 'viewer')
    expect(viewer.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')

    const none = await retryNow(step.id, null)
    expect(none.status).toBe(401)
    expect(none.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')

    const key = await data<{ createApiKey: { secret: string } }>(
      'mutation ($at: DateTime) { createApiKey(name: "briefly", role: OPERATOR, expiresAt: $at) { secret } }',
      { at: new Date(Date.now() + 1200).toISOString() },
    )
    await sleep(1500)
    const expired = await retryNow(step.id, { raw: key.createApiKey.secret })
    expect(expired.status).toBe(401)
    expect(expired.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    expect(expired.body.errors?.[0]?.message).toMatch(/expired/)

    const after = (await stepsOf(runId)).steps[0]
    expect(after).toMatchObject({ status: 'PENDING', attempts: 1, wakeAt: step.wakeAt })
    expect(receiver.calls.filter((c) => c.key?.startsWith(`${runId}-`))).toHaveLength(1)
  })
})
