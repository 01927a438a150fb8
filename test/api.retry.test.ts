/**
 * retryRun through the real server with its runner and a real HTTP receiver:
 * a run whose second webhook fails is retried; the first webhook is not called
 * again (counted at the receiver), the failed one is called once more; the
 * skipped step's result names the original; retrying twice answers the same
 * run, and so do six retries at once (keyed, under an overlap policy, free);
 * fromStep 0 runs everything again; refusals for runs that did not fail.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver, waitFor } from './helpers/runnerHarness.ts'
import { type Auth, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let receiver: WebhookReceiver
/** Whether the next call to /hooks/second fails (HTTP 500). */
let failSecond = true

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/second', () => {
    const fail = failSecond
    failSecond = false
    return fail ? { status: 500, body: 'down' } : { status: 200 }
  })
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } })
})
afterAll(async () => {
  await s?.close()
  await receiver?.close()
})

const calls = (path: string) => receiver.calls.filter((c) => c.path === path).length

interface Run {
  id: string
  status: string
  scope: string
  params: unknown
  version: { id: string }
  retryOf: { id: string } | null
  steps: { seq: number; status: string; result: unknown }[]
}
const RUN_FIELDS = 'id status scope params version { id } retryOf { id } steps { seq status result }'

async function runOf(id: string): Promise<Run> {
  const res = await s.gql<{ run: Run }>(`query ($id: ID!) { run(id: $id) { ${RUN_FIELDS} } }`, {
    variables: { id },
    auth: 'viewer',
  })
  return res.body.data?.run as Run
}

function retry(id: string, fromStep?: number, auth: Auth = 'operator') {
  return s.gql<{ retryRun: Run }>(
    `mutation ($id: ID!, $fromStep: Int) { retryRun(id: $id, fromStep: $fromStep) { ${RUN_FIELDS} } }`,
    { variables: { id, fromStep }, auth },
  )
}

/** Create a definition (as admin) from `input` (slug, title, program, …); answers its id. */
async function createShow(input: Record<string, unknown>): Promise<string> {
  const res = await s.gql<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    { variables: { input }, auth: 'admin' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

/** Start a run of `definitionId` now (as operator), with a scope and params if given; answers its id. */
async function startNow(
  definitionId: string,
  extra: { scope?: string; params?: unknown } = {},
): Promise<string> {
  const res = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $scope: String, $params: JSON) { startRun(definitionId: $d, scope: $scope, params: $params) { id } }',
    { variables: { d: definitionId, ...extra }, auth: 'operator' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.startRun.id as string
}

/** A program of one webhook to `path` on the receiver, tried once. */
const oneWebhook = (path: string) => ({
  phases: [
    {
      name: 'main',
      steps: [{ kind: 'core.webhook', params: { url: `${receiver.url}${path}` }, retry: { attempts: 1 } }],
    },
  ],
})

async function failedRun(): Promise<string> {
  failSecond = true
  const definitionId = await createShow({
    slug: unique('retry'),
    title: 'Retried show',
    program: {
      phases: [
        {
          name: 'announce',
          steps: [
            { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/first` }, retry: { attempts: 1 } },
            { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/second` }, retry: { attempts: 1 } },
            { kind: 'core.log', params: { message: 'both sent' } },
          ],
        },
      ],
    },
  })
  const id = await startNow(definitionId, { scope: 'hall', params: { seat: 7 } })
  await waitFor(async () => (await runOf(id)).status === 'FAILED', { what: `run ${id} to fail` })
  return id
}

it('retries from the failed webhook: the earlier one is not called again, the failed one once more', async () => {
  const originalId = await failedRun()
  expect([calls('/hooks/first'), calls('/hooks/second')]).toEqual([1, 1])
  const original = await runOf(originalId)
  expect(original.steps.map((st) => st.status)).toEqual(['COMPLETED', 'FAILED', 'CANCELLED'])

  expect((await retry(originalId, undefined, 'viewer')).body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
  const res = await retry(originalId)
  expect(res.body.errors).toBeUndefined()
  const retried = res.body.data?.retryRun as Run
  expect(retried.id).not.toBe(originalId)
  expect(retried).toMatchObject({
    retryOf: { id: originalId },
    scope: 'hall',
    params: { seat: 7 },
    version: original.version,
  })
  await waitFor(async () => (await runOf(retried.id)).status === 'COMPLETED', {
    what: 'the retry to complete',
  })
  expect([calls('/hooks/first'), calls('/hooks/second')]).toEqual([1, 2])
  const done = await runOf(retried.id)
  expect(done.steps.map((st) => st.status)).toEqual(['SKIPPED', 'COMPLETED', 'COMPLETED'])
  expect(JSON.stringify(done.steps[0]?.result)).toContain(`run ${originalId}`)

  // Idempotent per original run: the same retry, nothing called again.
  const again = await retry(originalId)
  expect(again.body.data?.retryRun.id).toBe(retried.id)
  // The retry completed: it cannot be retried; nor can an unknown run.
  const refused = await retry(retried.id)
  expect(refused.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
  expect(refused.body.errors?.[0]?.message).toContain('only a FAILED run')
  expect((await retry('999999')).body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
  expect([calls('/hooks/first'), calls('/hooks/second')]).toEqual([1, 2])
})

it('fromStep 0 runs every step again; a fromStep outside the program is refused', async () => {
  receiver.reset()
  receiver.route('/hooks/second', () => {
    const fail = failSecond
    failSecond = false
    return fail ? { status: 500, body: 'down' } : { status: 200 }
  })
  const originalId = await failedRun()
  const bad = await retry(originalId, 3)
  expect(bad.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  expect(bad.body.errors?.[0]?.message).toContain('0 to 2')
  const res = await retry(originalId, 0)
  const id = res.body.data?.retryRun.id as string
  await waitFor(async () => (await runOf(id)).status === 'COMPLETED', { what: 'the retry to complete' })
  expect([calls('/hooks/first'), calls('/hooks/second')]).toEqual([2, 2])
})

it('a retry takes its concurrency key: refused while another run holds it, started once it is free', async () => {
  const create = (program: unknown) =>
    createShow({ slug: unique('keyed'), title: 'k', concurrencyKey: 'stage-1', program })
  receiver.route('/hooks/gone', () => ({ status: 500 }))
  const originalId = await startNow(await create(oneWebhook('/hooks/gone')))
  await waitFor(async () => (await runOf(originalId)).status === 'FAILED', { what: 'the keyed run to fail' })
  const holderId = await startNow(
    await create({ phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'hold' } }] }] }),
  )
  await waitFor(async () => (await runOf(holderId)).status === 'RUNNING', { what: 'the holder to run' })
  const refused = await retry(originalId)
  expect(refused.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
  expect(refused.body.errors?.[0]?.message).toContain(`held by run ${holderId}`)
  await s.gql('mutation ($id: ID!) { cancelRun(id: $id) { applied } }', {
    variables: { id: holderId },
    auth: 'operator',
  })
  receiver.route('/hooks/gone', () => ({ status: 200 }))
  const res = await retry(originalId)
  expect(res.body.errors).toBeUndefined()
  const id = res.body.data?.retryRun.id as string
  await waitFor(async () => (await runOf(id)).status === 'COMPLETED', { what: 'the keyed retry to complete' })
})

it('six retries of one original at once answer one run, keyed or under an overlap policy; one retry is made', async () => {
  const failingShow = async (extra: Record<string, unknown>, path: string) => {
    receiver.route(path, () => ({ status: 500 }))
    const definitionId = await createShow({
      slug: unique('race'),
      title: 'raced retries',
      ...extra,
      program: oneWebhook(path),
    })
    const id = await startNow(definitionId)
    await waitFor(async () => (await runOf(id)).status === 'FAILED', { what: `run ${id} to fail` })
    // The retries' webhook answers, so each retry completes and frees what it holds.
    receiver.route(path, () => ({ status: 200 }))
    return id
  }
  // A key the retry takes in its transaction, and a scope a non-ALLOW_ALL policy
  // guards: the losers of the race used to be refused (CONFLICT, "held by run
  // N" / "in progress") by the very retry that won, instead of answered it.
  for (const [extra, path] of [
    [{ concurrencyKey: unique('race-key') }, '/hooks/race-keyed'],
    [{ overlap: 'SKIP' }, '/hooks/race-overlap'],
    [{}, '/hooks/race-free'],
  ] as const) {
    const originalId = await failingShow(extra, path)
    const answers = await Promise.all(Array.from({ length: 6 }, () => retry(originalId)))
    expect(answers.map((a) => a.body.errors?.[0]?.message ?? null)).toEqual(Array(6).fill(null))
    const ids = new Set(answers.map((a) => a.body.data?.retryRun.id))
    expect(ids.size, JSON.stringify(extra)).toBe(1)
    const retryId = answers[0]?.body.data?.retryRun.id as string
    expect(answers[0]?.body.data?.retryRun.retryOf).toEqual({ id: originalId })
    await waitFor(async () => (await runOf(retryId)).status === 'COMPLETED', {
      what: 'the raced retry to complete',
    })
    const made = await s.t.db.query<{ n: number }>(
      'SELECT COUNT(*) AS n FROM event_runs WHERE retry_of = ?',
      [originalId],
    )
    expect(Number(made[0]?.n)).toBe(1)
  }
})
