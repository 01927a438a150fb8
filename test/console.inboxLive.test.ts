/**
 * The console's inbox lives on `waitingStepChanges`, in chromium: after the
 * whole inbox once, each cue that parks or leaves arrives as a change over
 * the socket. While the stream is up, no poll's answer is shown (it would be
 * read at another moment than the next change is relative to); the slow
 * safety poll subscribes afresh instead. A cue answered on the page leaves it
 * at once.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext } from './helpers/browser.ts'
import { createDefinition, must, startRun, waitingCues } from './helpers/consoleScene.ts'
import { eventually, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let definitionId: string

beforeAll(async () => {
  // The console polls every 500 ms at this setting, so its live safety poll comes every 5 s.
  ;[s, browser] = await Promise.all([
    startTestServer({ runner: true, env: { STATUS_POLL_MS: '100' } }),
    launchBrowser(),
  ])
  definitionId = await createDefinition(s, {
    slug: 'doors',
    title: 'Doors',
    scopes: ['a', 'b', 'c'],
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            { kind: 'core.cue', params: { prompt: 'Open the doors?' } },
            { kind: 'core.wait', params: { seconds: 3600 } },
          ],
        },
      ],
    },
  })
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
})

async function parkedCue(scope: string): Promise<string> {
  const runId = await startRun(s, definitionId, scope)
  const cue = await eventually(async () => (await waitingCues(s)).find((c) => c.run.id === runId))
  return cue.id
}

/** Sign in on `page` itself, so what watches it sees its first request. */
async function signInOn(page: Page, role: 'operator', hash: string): Promise<void> {
  await page.goto(`${s.url}/${hash}`)
  await page.getByLabel('Access token').fill(TOKENS[role])
  await page.getByRole('button', { name: 'Sign in', exact: true }).click()
  await page.getByTestId('role').waitFor()
}

/** What the page sent over its socket and the inbox queries it posted over HTTP. */
function watchTraffic(page: Page): { subscribes: string[]; inboxQueries: () => number } {
  const subscribes: string[] = []
  let inboxQueries = 0
  page.on('websocket', (ws) =>
    ws.on('framesent', (frame) => {
      const text = typeof frame.payload === 'string' ? frame.payload : frame.payload.toString()
      const message = JSON.parse(text) as { type?: string; payload?: { query?: string } }
      if (message.type === 'subscribe' && message.payload?.query) subscribes.push(message.payload.query)
    }),
  )
  page.on('console', (m) => console.log('page:', m.text()))
  page.on('websocket', (ws) =>
    ws.on('framereceived', (f) => console.log('recv', String(f.payload).slice(0, 300))),
  )
  page.on('request', (req) => {
    if (/query Inbox\b/.test(req.postData() ?? '')) inboxQueries++
  })
  return { subscribes, inboxQueries: () => inboxQueries }
}

describe('the live inbox', () => {
  it('follows cues as changes, shows no poll while live, and re-subscribes for its safety check', async () => {
    const first = await parkedCue('a')
    const live = await (await newContext(browser)).newPage()
    const seen = watchTraffic(live)
    await signInOn(live, 'operator', '#/inbox')
    const card = (id: string) => live.locator(`[data-cue-id="${id}"]`)
    await card(first).waitFor()
    await live.getByText('Live.').waitFor()
    expect(seen.subscribes.filter((q) => q.includes('waitingStepChanges'))).toHaveLength(1)
    expect(seen.subscribes.some((q) => /\bwaitingSteps\b/.test(q))).toBe(false)

    // A cue parks and another is answered elsewhere: both reach the page as changes.
    const second = await parkedCue('b')
    await card(second).waitFor({ timeout: 5000 })
    await must(s, 'mutation ($id: ID!) { resolveCue(stepId: $id, note: "elsewhere") { applied } }', {
      id: first,
    })
    await card(first).waitFor({ state: 'detached', timeout: 5000 })

    // Past one safety interval: a fresh subscription, not an HTTP read, and the same inbox.
    const queriesBefore = seen.inboxQueries()
    await eventually(
      async () => (seen.subscribes.filter((q) => q.includes('waitingStepChanges')).length >= 2 ? true : null),
      12_000,
    )
    expect(seen.inboxQueries()).toBe(queriesBefore)
    await live.waitForTimeout(500)
    expect(
      await live.locator('[data-cue-id]').evaluateAll((els) => els.map((e) => e.getAttribute('data-cue-id'))),
    ).toEqual([second])

    // Answered here: gone from the page at once, and the server agrees.
    await card(second).getByRole('textbox').fill('doors open')
    await card(second).getByRole('button', { name: 'Resolve' }).click()
    await card(second).waitFor({ state: 'detached', timeout: 2000 })
    await live.getByTestId('inbox-empty').waitFor()
    expect(await waitingCues(s)).toEqual([])
    await live.context().close()
  }, 60_000)
})
