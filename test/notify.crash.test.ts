/**
 * SIGKILL mid-ladder: a server in a child process is killed after a cue's
 * first reminder went out and stays down across the second one's time; the
 * instance started next sends the second and third reminders once each, and
 * neither the waiting notice nor the first reminder again.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterAll, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'
import { createTestDb, type TestDb } from './helpers/db.ts'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, SHOWRUNNER_TOKENS, TOKENS } from './helpers/server.ts'

const repoRoot = fileURLToPath(new URL('..', import.meta.url))
const fixture = fileURLToPath(new URL('./fixtures/notifyServer.ts', import.meta.url))

let child: ChildProcess | null = null
let after: App | null = null
let t: TestDb | null = null
let rx: Receiver | null = null
afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  await after?.stop()
  await t?.drop()
  await rx?.close()
})

async function gql<T>(
  url: string,
  query: string,
  variables: Record<string, unknown>,
  role: keyof typeof TOKENS,
) {
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKENS[role]}` },
    body: JSON.stringify({ query, variables }),
  })
  const body = (await res.json()) as { data?: T; errors?: unknown[] }
  if (body.errors) throw new Error(JSON.stringify(body.errors))
  return body.data as T
}

it('SIGKILL mid-ladder: the next rungs arrive once after the restart, none earlier repeated', async () => {
  rx = await startReceiver()
  t = await createTestDb()
  const env = {
    DATABASE_URL: t.url,
    SHOWRUNNER_TOKENS,
    RUNNER: 'on',
    TICK_MS: '50',
    LEASE_MS: '2000',
    NOTIFY_POLL_MS: '20',
    WEBHOOK_ALLOW: `${rx.url}/`,
    INSTANCE_ID: 'doomed',
  }
  let output = ''
  child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()))
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()))
  const url = await eventually(() => /^ready (\S+)$/m.exec(output)?.[1], 30_000)

  await gql(
    url,
    'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
    {
      input: {
        name: 'crash',
        kind: 'WEBHOOK',
        target: `${rx.url}/crash`,
        events: ['CUE_WAITING', 'CUE_REMINDER'],
      },
    },
    'admin',
  )
  const def = await gql<{ createDefinition: { id: string } }>(
    url,
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    {
      input: {
        slug: unique('crash'),
        title: 'Crash',
        program: {
          phases: [
            {
              name: 'main',
              steps: [
                { kind: 'core.cue', params: { prompt: 'Still there?', remindAfterSeconds: [1, 3, 4] } },
              ],
            },
          ],
        },
      },
    },
    'admin',
  )
  await gql(
    url,
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    { d: def.createDefinition.id },
    'operator',
  )
  await eventually(() => rx?.requests.some((r) => r.json.type === 'cue.reminder'), 10_000)
  // Let the first reminder's delivery be written down, then kill without a chance to clean up.
  await new Promise((r) => setTimeout(r, 300))
  child.kill('SIGKILL')
  await new Promise((r) => child?.once('exit', r))
  const before = rx.requests.length
  expect(before).toBe(2)
  // Down across the second reminder's time (3 s after the cue opened).
  await new Promise((r) => setTimeout(r, 2500))
  expect(rx.requests.length).toBe(before)

  after = buildApp(
    loadConfig({ ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', INSTANCE_ID: 'next' }),
    {
      logger: silentLogger(),
    },
  )
  await after.start()
  await eventually(() => (rx?.requests.length ?? 0) >= 4, 15_000)
  await new Promise((r) => setTimeout(r, 1500))
  const got = rx.requests
  expect(got.map((r) => r.json.type)).toEqual(['cue.waiting', 'cue.reminder', 'cue.reminder', 'cue.reminder'])
  expect(got.map((r) => (r.json.cue as { remindersSent: number }).remindersSent)).toEqual([0, 1, 2, 3])
  expect(new Set(got.map((r) => r.headers['webhook-id'])).size).toBe(4)
}, 60_000)
