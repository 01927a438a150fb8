/**
 * Notifications out over real HTTP: channels (admin only, refused targets),
 * Standard Webhooks signatures checked with the `standardwebhooks` verifier,
 * retries that keep one webhook-id, the ladder's rungs each delivered once,
 * three instances on one database delivering each event once, and a restart
 * mid-ladder that neither loses nor repeats a rung.
 */
import { Webhook } from 'standardwebhooks'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, SHOWRUNNER_TOKENS, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

const SECRET = `whsec_${Buffer.from('a-signing-key-for-the-tests-0123').toString('base64')}`
process.env.SHOWRUNNER_SECRET_NOTIFY_TEST_KEY = SECRET

let rx: Receiver
let s: TestServer
beforeAll(async () => {
  rx = await startReceiver()
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${rx.url}/`, NOTIFY_POLL_MS: '50' } })
})
afterAll(async () => {
  await s?.close()
  await rx?.close()
})

const CREATE = `mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id name kind target events teams lateStartSeconds enabled } }`

type Gql = TestServer['gql']

async function createChannel(gql: Gql, input: Record<string, unknown>): Promise<string> {
  const res = await gql<{ createNotificationChannel: { id: string } }>(CREATE, {
    variables: {
      input: { name: unique('ch'), kind: 'WEBHOOK', signingSecret: '{{secret.NOTIFY_TEST_KEY}}', ...input },
    },
  })
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createNotificationChannel.id as string
}

async function definition(gql: Gql, params: Record<string, unknown>): Promise<string> {
  const slug = unique('show')
  const res = await gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    {
      variables: {
        input: {
          slug,
          title: slug,
          program: { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params }] }] },
        },
      },
    },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

async function start(gql: Gql, definitionId: string, scope = unique('scope')): Promise<string> {
  const res = await gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $s: String) { startRun(definitionId: $d, scope: $s) { id } }',
    { variables: { d: definitionId, s: scope }, auth: 'operator' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.startRun.id as string
}

function verify(r: { body: string; headers: Record<string, unknown> }): unknown {
  return new Webhook(SECRET).verify(r.body, {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  })
}

const ofPath = (path: string) => rx.requests.filter((r) => r.path === path)

describe('channels', () => {
  it('are admin only, and a target the allow-list refuses is BAD_USER_INPUT at create', async () => {
    const input = { name: unique('ch'), kind: 'WEBHOOK', target: `${rx.url}/x`, events: ['CUE_WAITING'] }
    const asOperator = await s.gql(CREATE, { variables: { input }, auth: 'operator' })
    expect(asOperator.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const list = await s.gql('{ notificationChannels { id } }', { auth: 'viewer' })
    expect(list.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const none = await s.gql('{ notificationChannels { id } }', { auth: null })
    expect(none.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED')
    for (const bad of [
      { target: 'http://169.254.169.254/latest' },
      { target: 'ftp://example.com/' },
      { events: [] },
      { signingSecret: 'the-secret-itself' },
      { kind: 'EMAIL', target: 'not an address' },
    ]) {
      const res = await s.gql(CREATE, { variables: { input: { ...input, ...bad } } })
      expect(res.body.errors?.[0]?.extensions?.code, JSON.stringify(bad)).toBe('BAD_USER_INPUT')
      expect(res.body.errors?.[0]?.message).not.toContain('the-secret-itself')
    }
    const ok = await s.gql<{ createNotificationChannel: { lateStartSeconds: number; enabled: boolean } }>(
      CREATE,
      {
        variables: { input },
      },
    )
    expect(ok.body.data?.createNotificationChannel).toMatchObject({ lateStartSeconds: 60, enabled: true })
    const again = await s.gql(CREATE, { variables: { input } })
    expect(again.body.errors?.[0]?.extensions?.code).toBe('CONFLICT')
  })
})

describe('webhook deliveries', () => {
  it('a receiver failing twice then answering: three requests, one webhook-id, valid signatures', async () => {
    const path = `/flaky-${unique('p')}`
    const channelId = await createChannel(s.gql, { target: `${rx.url}${path}`, events: ['CUE_WAITING'] })
    let seen = 0
    rx.respond = (_n, req) => (req.path === path ? (++seen <= 2 ? 500 : 204) : 200)
    const def = await definition(s.gql, { prompt: 'Flaky?' })
    const runId = await start(s.gql, def)
    await eventually(() => ofPath(path).length >= 3, 15_000)
    await new Promise((r) => setTimeout(r, 2500))
    const got = ofPath(path)
    expect(got).toHaveLength(3)
    expect(new Set(got.map((r) => r.headers['webhook-id'])).size).toBe(1)
    for (const r of got) expect(verify(r)).toMatchObject({ type: 'cue.waiting' })
    // About a second, then about two, between attempts.
    expect((got[1]?.at ?? 0) - (got[0]?.at ?? 0)).toBeGreaterThanOrEqual(600)
    const body = got[0]?.json as Record<string, unknown>
    expect(body).toMatchObject({
      type: 'cue.waiting',
      id: got[0]?.headers['webhook-id'],
      run: { id: runId },
      cue: { prompt: 'Flaky?', remindersSent: 0 },
    })
    expect(Object.keys(body.links as object).sort()).toEqual(['answer', 'console'])
    const page = await s.gql<{
      notificationDeliveries: {
        nodes: { status: string; attempts: number; eventId: string; lastError: string | null }[]
      }
    }>(
      'query ($c: ID) { notificationDeliveries(channelId: $c) { nodes { status attempts eventId lastError } } }',
      {
        variables: { c: channelId },
      },
    )
    expect(page.body.data?.notificationDeliveries.nodes).toEqual([
      { status: 'DELIVERED', attempts: 3, eventId: got[0]?.headers['webhook-id'], lastError: null },
    ])
    // A tampered body does not verify.
    expect(() =>
      verify({ ...(got[0] as { body: string; headers: Record<string, unknown> }), body: '{}' }),
    ).toThrow()
    rx.respond = () => 200
  }, 30_000)

  it('the ladder at its times: waiting, reminder, escalation and timeout each delivered once, in order', async () => {
    const path = `/ladder-${unique('p')}`
    await createChannel(s.gql, {
      target: `${rx.url}${path}`,
      events: ['CUE_WAITING', 'CUE_REMINDER', 'CUE_ESCALATED', 'CUE_TIMED_OUT', 'CUE_ANSWERED'],
    })
    const def = await definition(s.gql, {
      prompt: 'Ladder',
      assignee: 'team:crew',
      remindAfterSeconds: [1],
      escalate: [{ afterSeconds: 2, to: 'team:leads' }],
      timeoutSeconds: 3,
      onTimeout: 'continue',
    })
    await start(s.gql, def)
    await eventually(() => ofPath(path).length >= 4, 15_000)
    await new Promise((r) => setTimeout(r, 1000))
    const got = ofPath(path)
    expect(got.map((r) => r.json.type)).toEqual([
      'cue.waiting',
      'cue.reminder',
      'cue.escalated',
      'cue.timed_out',
    ])
    // The rungs' own times (each event's occurredAt), not when they arrived:
    // arrival adds the dispatcher's poll and the suite's load to each, apart.
    const at = got.map((r) => Date.parse(String(r.json.occurredAt)))
    const t0 = at[0] as number
    expect((at[1] as number) - t0).toBeGreaterThanOrEqual(900)
    expect((at[2] as number) - t0).toBeGreaterThanOrEqual(1900)
    expect((at[3] as number) - t0).toBeGreaterThanOrEqual(2900)
    // And each arrived after the one before (delivered in order).
    for (let i = 1; i < got.length; i++)
      expect(got[i]?.at as number).toBeGreaterThanOrEqual(got[i - 1]?.at as number)
    expect(got[2]?.json.cue).toMatchObject({ escalationLevel: 1, assignees: ['team:crew', 'team:leads'] })
    expect(got[3]?.json.cue).toMatchObject({ answer: { outcome: 'timedOut', via: 'timeout' } })
    for (const r of got) verify(r)
  }, 30_000)

  it('teams narrows cue events to cues assigned to those teams; definitionIds narrows by definition', async () => {
    const leads = `/leads-${unique('p')}`
    const onlyDef = `/def-${unique('p')}`
    const other = await definition(s.gql, { prompt: 'Other', assignee: 'team:crew' })
    const def = await definition(s.gql, { prompt: 'For leads', assignee: 'team:leads' })
    await createChannel(s.gql, { target: `${rx.url}${leads}`, events: ['CUE_WAITING'], teams: ['leads'] })
    await createChannel(s.gql, {
      target: `${rx.url}${onlyDef}`,
      events: ['CUE_WAITING'],
      definitionIds: [other],
    })
    await start(s.gql, other)
    await start(s.gql, def)
    await eventually(() => ofPath(leads).length >= 1 && ofPath(onlyDef).length >= 1, 10_000)
    await new Promise((r) => setTimeout(r, 500))
    expect(ofPath(leads).map((r) => (r.json.cue as { prompt: string }).prompt)).toEqual(['For leads'])
    expect(ofPath(onlyDef).map((r) => (r.json.cue as { prompt: string }).prompt)).toEqual(['Other'])
  })

  it('CUE_ANSWERED names who answered', async () => {
    const path = `/answered-${unique('p')}`
    await createChannel(s.gql, { target: `${rx.url}${path}`, events: ['CUE_ANSWERED'] })
    const def = await definition(s.gql, { prompt: 'Answer me' })
    const runId = await start(s.gql, def)
    const stepId = await eventually(async () => {
      const r = await s.gql<{ run: { steps: { id: string; parked: boolean }[] } }>(
        'query ($id: ID!) { run(id: $id) { steps { id parked } } }',
        { variables: { id: runId } },
      )
      const st = r.body.data?.run.steps[0]
      return st?.parked ? st.id : null
    })
    await s.gql('mutation ($id: ID!) { resolveCue(stepId: $id, note: "go") { applied } }', {
      variables: { id: stepId },
      auth: 'operator',
    })
    await eventually(() => ofPath(path).length >= 1)
    expect(ofPath(path)[0]?.json.cue).toMatchObject({
      answer: { outcome: 'resolved', via: 'api', note: 'go' },
    })
  })
})

async function startApp(
  t: TestDb,
  name: string,
  env: Record<string, string>,
): Promise<{ app: App; url: string }> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: t.url,
    SHOWRUNNER_TOKENS,
    RUNNER: 'on',
    TICK_MS: '50',
    LEASE_MS: '5000',
    STATUS_POLL_MS: '50',
    NOTIFY_POLL_MS: '20',
    LOG_LEVEL: 'silent',
    INSTANCE_ID: `${name}-${unique('i')}`,
    ...env,
  })
  const app = buildApp(config, { logger: silentLogger() })
  const { url } = await app.start()
  return { app, url }
}

function gqlAt(url: string): Gql {
  return (async (query: string, o: { variables?: Record<string, unknown>; auth?: string | null } = {}) => {
    const auth = o.auth === undefined ? 'admin' : o.auth
    const res = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(auth ? { authorization: `Bearer ${TOKENS[auth as keyof typeof TOKENS]}` } : {}),
      },
      body: JSON.stringify({ query, variables: o.variables }),
    })
    return { status: res.status, headers: res.headers, body: await res.json() }
  }) as Gql
}

describe('several instances on one database', () => {
  it('three instances: one delivery per event', async () => {
    const t = await createTestDb()
    const path = `/three-${unique('p')}`
    const env = { WEBHOOK_ALLOW: `${rx.url}/` }
    const apps = await Promise.all(['a', 'b', 'c'].map((n) => startApp(t, n, env)))
    try {
      const gql = gqlAt(apps[0]?.url as string)
      await createChannel(gql, { target: `${rx.url}${path}`, events: ['CUE_WAITING'] })
      const def = await definition(gql, { prompt: 'Three' })
      // Runs started through every instance, 30 in all.
      await Promise.all(Array.from({ length: 30 }, (_, i) => start(gqlAt(apps[i % 3]?.url as string), def)))
      await eventually(() => ofPath(path).length >= 30, 20_000)
      await new Promise((r) => setTimeout(r, 1500))
      const ids = ofPath(path).map((r) => r.headers['webhook-id'])
      expect(ids).toHaveLength(30)
      expect(new Set(ids).size).toBe(30)
    } finally {
      await Promise.all(apps.map((a) => a.app.stop()))
      await t.drop()
    }
  }, 60_000)

  it('a restart mid-ladder: the next rungs arrive once each, none repeated', async () => {
    const t = await createTestDb()
    const path = `/restart-${unique('p')}`
    const env = { WEBHOOK_ALLOW: `${rx.url}/` }
    let first = await startApp(t, 'before', env)
    try {
      const gql = gqlAt(first.url)
      await createChannel(gql, { target: `${rx.url}${path}`, events: ['CUE_WAITING', 'CUE_REMINDER'] })
      const def = await definition(gql, { prompt: 'Restart', remindAfterSeconds: [1, 3, 4] })
      await start(gql, def)
      await eventually(() => ofPath(path).some((r) => r.json.type === 'cue.reminder'), 10_000)
      await first.app.stop()
      // Down across the second reminder's time: it is sent once the next instance is up.
      await new Promise((r) => setTimeout(r, 2500))
      first = await startApp(t, 'after', env)
      await eventually(() => ofPath(path).length >= 4, 15_000)
      await new Promise((r) => setTimeout(r, 1500))
      const got = ofPath(path)
      expect(got.map((r) => r.json.type)).toEqual([
        'cue.waiting',
        'cue.reminder',
        'cue.reminder',
        'cue.reminder',
      ])
      expect(got.map((r) => (r.json.cue as { remindersSent: number }).remindersSent)).toEqual([0, 1, 2, 3])
      expect(new Set(got.map((r) => r.headers['webhook-id'])).size).toBe(4)
    } finally {
      await first.app.stop()
      await t.drop()
    }
  }, 60_000)
})
