/**
 * Run alerts over real HTTP: RUN_COMPLETED, RUN_FAILED, RUN_DEGRADED and
 * RUN_MISSED written with the status change that made them, RUN_LATE_START
 * once per run (a run blocked behind a concurrency key counts),
 * testNotificationChannel, and rehearsals recorded without sending anything.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let rx: Receiver
let s: TestServer
beforeAll(async () => {
  rx = await startReceiver()
  s = await startTestServer({
    runner: true,
    env: {
      // Port 9 of the loopback refuses at once: the degrading webhook below fails fast.
      WEBHOOK_ALLOW: `${rx.url}/,http://127.0.0.1:9/`,
      NOTIFY_POLL_MS: '50',
    },
  })
})
afterAll(async () => {
  await s?.close()
  await rx?.close()
})

const ofPath = (path: string) => rx.requests.filter((r) => r.path === path)
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function channel(
  events: string[],
  extra: Record<string, unknown> = {},
): Promise<{ id: string; path: string }> {
  const path = `/${unique('alert')}`
  const res = await s.gql<{ createNotificationChannel: { id: string } }>(
    'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
    {
      variables: {
        input: { name: unique('ch'), kind: 'WEBHOOK', target: `${rx.url}${path}`, events, ...extra },
      },
    },
  )
  expect(res.body.errors).toBeUndefined()
  return { id: res.body.data?.createNotificationChannel.id as string, path }
}

async function definition(steps: unknown[], extra: Record<string, unknown> = {}): Promise<string> {
  const slug = unique('show')
  const res = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    { variables: { input: { slug, title: slug, program: { phases: [{ name: 'main', steps }] }, ...extra } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

async function start(definitionId: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $s: String, $at: DateTime, $r: Boolean) { startRun(definitionId: $d, scope: $s, at: $at, rehearsal: $r) { id } }',
    { variables: { d: definitionId, s: unique('scope'), ...extra }, auth: 'operator' },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.startRun.id as string
}

describe('run alerts', () => {
  it('RUN_COMPLETED, RUN_FAILED and RUN_DEGRADED arrive once each, for the run that did it', async () => {
    const ch = await channel(['RUN_COMPLETED', 'RUN_FAILED', 'RUN_DEGRADED'])
    const ok = await start(await definition([{ kind: 'core.log', params: { message: 'hi' } }]))
    const failing = await start(
      await definition([{ kind: 'core.cue', params: { prompt: 'Nobody', timeoutSeconds: 1 } }]),
    )
    const degraded = await start(
      await definition([
        { kind: 'core.webhook', params: { url: 'http://127.0.0.1:9/nowhere' }, onError: 'degrade' },
        { kind: 'core.log', params: { message: 'after' } },
      ]),
    )
    await eventually(() => ofPath(ch.path).length >= 4, 15_000)
    await pause(800)
    const got = ofPath(ch.path).map((r) => [r.json.type, (r.json.run as { id: string }).id])
    expect(got).toHaveLength(4)
    expect(got).toEqual(
      expect.arrayContaining([
        ['run.completed', ok],
        ['run.failed', failing],
        ['run.degraded', degraded],
        ['run.completed', degraded],
      ]),
    )
    const failed = ofPath(ch.path).find((r) => r.json.type === 'run.failed')?.json.run as Record<
      string,
      unknown
    >
    expect(failed).toMatchObject({ status: 'FAILED' })
    expect(String(failed.error)).toContain('timed out')
  }, 30_000)

  it('RUN_MISSED for a run past its grace', async () => {
    const ch = await channel(['RUN_MISSED'])
    const def = await definition([{ kind: 'core.log', params: { message: 'late' } }], { graceSeconds: 1 })
    const runId = await start(def, { at: new Date(Date.now() - 3_600_000).toISOString() })
    await eventually(() => ofPath(ch.path).length >= 1, 10_000)
    expect(ofPath(ch.path)[0]?.json).toMatchObject({
      type: 'run.missed',
      run: { id: runId, status: 'MISSED' },
    })
  })

  it('RUN_LATE_START once per run, counting a run blocked behind its concurrency key', async () => {
    const ch = await channel(['RUN_LATE_START'], { lateStartSeconds: 1 })
    const key = unique('key')
    const def = await definition([{ kind: 'core.cue', params: { prompt: 'Hold the key' } }], {
      concurrencyKey: key,
      graceSeconds: 3600,
    })
    const holder = await start(def)
    await eventually(async () => {
      const r = await s.gql<{ run: { status: string } }>('query ($id: ID!) { run(id: $id) { status } }', {
        variables: { id: holder },
      })
      return r.body.data?.run.status === 'RUNNING'
    })
    const blocked = await start(def)
    await eventually(() => ofPath(ch.path).length >= 1, 10_000)
    await pause(2500)
    const got = ofPath(ch.path)
    expect(got).toHaveLength(1)
    expect(got[0]?.json).toMatchObject({ type: 'run.late_start', run: { id: blocked } })
  }, 20_000)

  it('testNotificationChannel sends a TEST now; admin only', async () => {
    const ch = await channel(['CUE_WAITING'])
    const refused = await s.gql('mutation ($id: ID!) { testNotificationChannel(id: $id) { id } }', {
      variables: { id: ch.id },
      auth: 'operator',
    })
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN')
    const missing = await s.gql('mutation { testNotificationChannel(id: "999999") { id } }')
    expect(missing.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND')
    const res = await s.gql<{ testNotificationChannel: { id: string; event: string; status: string } }>(
      'mutation ($id: ID!) { testNotificationChannel(id: $id) { id event status channel { id } } }',
      { variables: { id: ch.id } },
    )
    expect(res.body.errors).toBeUndefined()
    // Sent at once: the answer may already see it delivered.
    expect(res.body.data?.testNotificationChannel.event).toBe('TEST')
    expect(['PENDING', 'DELIVERED']).toContain(res.body.data?.testNotificationChannel.status)
    await eventually(() => ofPath(ch.path).length >= 1)
    expect(ofPath(ch.path)[0]?.json).toMatchObject({ type: 'test' })
    // The receiver has it; the row says so once the sender has read the answer.
    await eventually(async () => {
      const after = await s.gql<{ notificationDeliveries: { nodes: { status: string }[] } }>(
        'query ($c: ID) { notificationDeliveries(channelId: $c) { nodes { status } } }',
        { variables: { c: ch.id } },
      )
      const nodes = after.body.data?.notificationDeliveries.nodes
      expect(nodes).toHaveLength(1)
      return nodes?.[0]?.status === 'DELIVERED'
    })
    // redeliver sends it again with the same webhook-id.
    const again = await s.gql<{ redeliver: { status: string } }>(
      'mutation ($id: ID!) { redeliver(deliveryId: $id) { status } }',
      { variables: { id: res.body.data?.testNotificationChannel.id } },
    )
    expect(['PENDING', 'DELIVERED']).toContain(again.body.data?.redeliver.status)
    await eventually(() => ofPath(ch.path).length >= 2)
    const ids = ofPath(ch.path).map((r) => r.headers['webhook-id'])
    expect(ids[0]).toBe(ids[1])
  })

  it('a rehearsal walks the ladder and records its deliveries as rehearsal, sending nothing', async () => {
    const ch = await channel(['CUE_WAITING', 'CUE_REMINDER', 'CUE_TIMED_OUT', 'RUN_COMPLETED'])
    const def = await definition([
      {
        kind: 'core.cue',
        params: { prompt: 'Practice', remindAfterSeconds: [1], timeoutSeconds: 2, onTimeout: 'continue' },
      },
    ])
    const runId = await start(def, { r: true })
    await eventually(async () => {
      const r = await s.gql<{ run: { status: string } }>('query ($id: ID!) { run(id: $id) { status } }', {
        variables: { id: runId },
      })
      return r.body.data?.run.status === 'COMPLETED'
    }, 10_000)
    await pause(500)
    const page = await s.gql<{
      notificationDeliveries: { nodes: { event: string; status: string; rehearsal: boolean }[] }
    }>(
      'query ($r: ID, $c: ID) { notificationDeliveries(runId: $r, channelId: $c) { nodes { event status rehearsal } } }',
      { variables: { r: runId, c: ch.id } },
    )
    const nodes = page.body.data?.notificationDeliveries.nodes ?? []
    expect(nodes.map((n) => n.event).sort()).toEqual([
      'CUE_REMINDER',
      'CUE_TIMED_OUT',
      'CUE_WAITING',
      'RUN_COMPLETED',
    ])
    expect(nodes.every((n) => n.rehearsal && n.status === 'DELIVERED')).toBe(true)
    expect(ofPath(ch.path)).toHaveLength(0)
  }, 20_000)
})
