/**
 * Answer links: a cue notification carries a capability URL (PUBLIC_URL set);
 * its page, opened in chromium at a phone's size, shows the prompt with
 * Resolve and Skip and loads nothing from elsewhere; the answer is recorded
 * `via: link` under the channel's name; the link answers once and is dead once
 * the cue closes; only its digest is stored.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, PHONE } from './helpers/browser.ts'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, handOversOnceGivenBack, startTestServer, type TestServer } from './helpers/server.ts'

let rx: Receiver
let s: TestServer
let browser: Browser
beforeAll(async () => {
  rx = await startReceiver()
  s = await startTestServer({
    runner: true,
    env: { WEBHOOK_ALLOW: `${rx.url}/`, NOTIFY_POLL_MS: '50', PUBLIC_URL: 'https://shows.example.test' },
  })
  browser = await launchBrowser()
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await rx?.close()
})

const CUE = `query ($id: ID!) { run(id: $id) { status steps { id parked cue { answer { outcome by via note } } } } }`

async function cueWithLink(channelName: string): Promise<{ runId: string; link: string; path: string }> {
  const path = `/${unique('link')}`
  const ch = await s.gql(
    'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
    {
      variables: {
        input: { name: channelName, kind: 'WEBHOOK', target: `${rx.url}${path}`, events: ['CUE_WAITING'] },
      },
    },
  )
  expect(ch.body.errors).toBeUndefined()
  const slug = unique('show')
  const def = await s.gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    {
      variables: {
        input: {
          slug,
          title: 'Gala night',
          program: {
            phases: [
              {
                name: 'main',
                steps: [
                  {
                    kind: 'core.cue',
                    params: { prompt: 'Open the <doors>?', exclusive: true, assignee: 'someone' },
                  },
                ],
              },
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
  const runId = run.body.data?.startRun.id as string
  await eventually(() => rx.requests.some((r) => r.path === path), 10_000)
  const body = rx.requests.find((r) => r.path === path)?.json as {
    links: { answer: string; console: string }
  }
  expect(body.links.console).toBe(`https://shows.example.test/#/runs/${runId}`)
  expect(body.links.answer).toMatch(/^https:\/\/shows\.example\.test\/answer\/[A-Za-z0-9_-]{43}$/)
  // The server is reached here at its test address; PUBLIC_URL names where people reach it.
  return { runId, link: `${s.url}${new URL(body.links.answer).pathname}`, path }
}

describe('answer links', () => {
  it('open a phone-sized page with the prompt; Resolve records via link and the channel name; the link is single use', async () => {
    const name = unique('ops-hook')
    const { runId, link } = await cueWithLink(name)
    const token = link.split('/').at(-1) as string
    const stored = await s.t.db.query<{ digest: string }>('SELECT digest FROM cue_links')
    expect(stored.some((r) => r.digest === token)).toBe(false)
    expect(stored.every((r) => /^[0-9a-f]{64}$/.test(r.digest))).toBe(true)

    const context = await newContext(browser, { viewport: PHONE })
    const page = await context.newPage()
    const elsewhere: string[] = []
    page.on('request', (r) => {
      if (!r.url().startsWith(s.url)) elsewhere.push(r.url())
    })
    const violations: string[] = []
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text())
    })
    // Once its runner has given the park back, the answer hands the run straight to it.
    const handOvers = await handOversOnceGivenBack(s, runId)
    const handedOver = handOvers()
    const res = await page.goto(link)
    expect(res?.status()).toBe(200)
    expect(res?.headers()['content-security-policy']).toContain("default-src 'none'")
    expect(res?.headers()['referrer-policy']).toBe('no-referrer')
    await expect(page.locator('h1').textContent()).resolves.toBe('Open the <doors>?')
    const resolve = page.getByRole('button', { name: 'Resolve' })
    const box = await resolve.boundingBox()
    expect(box?.height ?? 0).toBeGreaterThanOrEqual(44)
    expect((box?.x ?? 0) + (box?.width ?? 0)).toBeLessThanOrEqual(PHONE.width)
    await page.fill('#note', 'from my phone')
    await resolve.click()
    await expect(page.locator('h1').textContent()).resolves.toBe('Thank you')
    await eventually(() => handOvers() === handedOver + 1)
    expect(elsewhere).toEqual([])
    expect(violations).toEqual([])

    const after = await s.gql<{ run: { steps: { cue: { answer: Record<string, string> } }[] } }>(CUE, {
      variables: { id: runId },
    })
    expect(after.body.data?.run.steps[0]?.cue.answer).toEqual({
      outcome: 'resolved',
      by: name,
      via: 'link',
      note: 'from my phone',
    })

    // Used twice: the second is refused, and nothing changes.
    const second = await fetch(link, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'outcome=skipped',
    })
    expect(second.status).toBe(410)
    expect(await second.text()).toContain('used already')
    await context.close()
  }, 30_000)

  it('is dead once the cue closes another way; a made-up token is refused', async () => {
    const { runId, link } = await cueWithLink(unique('ops-hook'))
    const run = await s.gql<{ run: { steps: { id: string }[] } }>(CUE, { variables: { id: runId } })
    const answered = await s.gql<{ resolveCue: { applied: boolean } }>(
      'mutation ($id: ID!) { resolveCue(stepId: $id) { applied } }',
      { variables: { id: run.body.data?.run.steps[0]?.id }, auth: 'admin' },
    )
    expect(answered.body.data?.resolveCue.applied).toBe(true)
    const page = await fetch(link)
    expect(page.status).toBe(410)
    expect(await page.text()).toContain('This cue is closed')
    const post = await fetch(link, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'outcome=resolved',
    })
    expect(post.status).toBe(410)
    const madeUp = await fetch(`${s.url}/answer/${'A'.repeat(43)}`)
    expect(madeUp.status).toBe(404)
    const junk = await fetch(`${s.url}/answer/%00..%2f`)
    expect([400, 404]).toContain(junk.status)
  })
})
