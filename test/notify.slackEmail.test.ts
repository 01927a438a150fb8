/**
 * SLACK and EMAIL channels: Slack gets `{text, blocks}` at its incoming-webhook
 * URL (a real HTTP receiver); EMAIL goes through SMTP_URL to a real SMTP
 * server in this process (smtp-server), plain text with the same links.
 */
import type { AddressInfo } from 'node:net'
import { SMTPServer } from 'smtp-server'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

interface Mail {
  from: string
  to: string[]
  data: string
}

let rx: Receiver
let s: TestServer
let smtp: SMTPServer
const mails: Mail[] = []
let refuseMail = 0

beforeAll(async () => {
  rx = await startReceiver()
  smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = []
      stream.on('data', (c: Buffer) => chunks.push(c))
      stream.on('end', () => {
        if (refuseMail > 0) {
          refuseMail--
          return callback(Object.assign(new Error('try later'), { responseCode: 451 }))
        }
        mails.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          data: Buffer.concat(chunks).toString('utf8'),
        })
        callback()
      })
    },
  })
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve))
  const port = (smtp.server.address() as AddressInfo).port
  s = await startTestServer({
    runner: true,
    env: {
      WEBHOOK_ALLOW: `${rx.url}/`,
      NOTIFY_POLL_MS: '50',
      SMTP_URL: `smtp://127.0.0.1:${port}`,
      SMTP_FROM: 'shows@example.test',
      PUBLIC_URL: 'https://shows.example.test/',
    },
  })
})
afterAll(async () => {
  await s?.close()
  await rx?.close()
  await new Promise<void>((resolve) => smtp.close(() => resolve()))
})

async function channel(input: Record<string, unknown>): Promise<string> {
  const res = await s.gql<{ createNotificationChannel: { id: string } }>(
    'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
    { variables: { input: { name: unique('ch'), events: ['CUE_WAITING'], ...input } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createNotificationChannel.id as string
}

async function cueRun(prompt: string): Promise<string> {
  const slug = unique('show')
  const def = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    {
      variables: {
        input: {
          slug,
          title: `Show ${slug}`,
          program: {
            phases: [
              { name: 'main', steps: [{ kind: 'core.cue', params: { prompt, assignee: 'team:crew' } }] },
            ],
          },
        },
      },
    },
  )
  const run = await s.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    {
      variables: { d: def.body.data?.createDefinition.id },
      auth: 'operator',
    },
  )
  return run.body.data?.startRun.id as string
}

describe('SLACK', () => {
  it('posts {text, blocks} with the console link', async () => {
    const path = `/slack-${unique('p')}`
    await channel({ kind: 'SLACK', target: `${rx.url}${path}` })
    const runId = await cueRun('Slack cue')
    await eventually(() => rx.requests.some((r) => r.path === path), 10_000)
    const got = rx.requests.filter((r) => r.path === path)
    expect(got).toHaveLength(1)
    const body = got[0]?.json as { text: string; blocks: { type: string }[] }
    expect(body.text).toContain('A cue is waiting')
    expect(body.text).toContain('Slack cue')
    expect(body.text).toContain('team:crew')
    expect(body.blocks[0]?.type).toBe('section')
    expect(JSON.stringify(body.blocks)).toContain(`https://shows.example.test/#/runs/${runId}`)
    expect(got[0]?.headers['webhook-signature']).toBeUndefined()
  })

  it('is refused at create when the allow-list refuses its URL', async () => {
    const res = await s.gql(
      'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
      {
        variables: {
          input: {
            name: unique('ch'),
            kind: 'SLACK',
            target: 'https://hooks.slack.com/services/X',
            events: ['TEST'],
          },
        },
      },
    )
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  })
})

describe('EMAIL', () => {
  it('sends a plain text mail through SMTP_URL, retried after a temporary refusal', async () => {
    refuseMail = 1
    const channelId = await channel({ kind: 'EMAIL', target: 'crew@example.test, lead@example.test' })
    const runId = await cueRun('Email cue')
    await eventually(() => mails.length >= 1, 15_000)
    await new Promise((r) => setTimeout(r, 500))
    expect(mails).toHaveLength(1)
    const mail = mails[0] as Mail
    expect(mail.from).toBe('shows@example.test')
    expect(mail.to.sort()).toEqual(['crew@example.test', 'lead@example.test'])
    // The subject is the headline, MIME-encoded for its dash.
    expect(mail.data).toMatch(/^Subject: =\?UTF-8\?Q\?A_cue_is_waiting/m)
    expect(mail.data).toContain('Content-Type: text/plain')
    expect(mail.data).toContain('Cue: Email cue')
    expect(mail.data).toContain(`https://shows.example.test/#/runs/${runId}`)
    const page = await s.gql<{ notificationDeliveries: { nodes: { status: string; attempts: number }[] } }>(
      'query ($c: ID) { notificationDeliveries(channelId: $c) { nodes { status attempts } } }',
      { variables: { c: channelId } },
    )
    expect(page.body.data?.notificationDeliveries.nodes).toEqual([{ status: 'DELIVERED', attempts: 2 }])
  }, 20_000)
})
