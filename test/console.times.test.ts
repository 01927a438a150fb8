/**
 * Times on console pages, in chromium (the browser in Europe/Paris): no page
 * shows a raw ISO-8601 instant, not in the text a person reads nor in a
 * tooltip, although the server writes them into log lines ("retrying at …",
 * "run requested … for …") and errors; every page names its one zone. The
 * run page of a show in Asia/Tokyo shows the retry time and the log's
 * instants in Tokyo time, as it says.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, signIn } from './helpers/browser.ts'
import { buildScene, createDefinition, must, waitingCues } from './helpers/consoleScene.ts'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver } from './helpers/runnerHarness.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let receiver: WebhookReceiver
let backoffRun: string
let scene: Awaited<ReturnType<typeof buildScene>>

const ISO = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/down', () => ({ status: 500, body: 'down' }))
  ;[s, browser] = await Promise.all([
    startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } }),
    launchBrowser(),
  ])
  scene = await buildScene(s)
  const def = await createDefinition(s, {
    slug: unique('tokyo'),
    title: 'Tokyo hook',
    timezone: 'Asia/Tokyo',
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            {
              kind: 'core.webhook',
              params: { url: `${receiver.url}/hooks/down` },
              retry: { attempts: 5, backoffSeconds: 600 },
            },
          ],
        },
      ],
    },
  })
  const started = await must<{ startRun: { id: string } }>(
    s,
    'mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }',
    { d: def, at: new Date(Date.now() + 500).toISOString() },
  )
  backoffRun = started.startRun.id
  await eventually(async () => {
    const d = await must<{ run: { logs: { message: string }[] } }>(
      s,
      'query ($id: ID!) { run(id: $id) { logs(limit: 20) { message } } }',
      { id: backoffRun },
    )
    return d.run.logs.some((l) => /retrying at \d{4}-/.test(l.message))
  }, 15_000)
  await eventually(async () => (await waitingCues(s)).length >= 2)
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await receiver?.close()
})

/** The page's text and its tooltips: whatever a person can read. */
async function readable(page: Page): Promise<string> {
  return page.evaluate(() => {
    const titles = [...document.querySelectorAll('[title]')].map((e) => e.getAttribute('title'))
    // What is rendered, as a person reads it (not the text of hidden nodes).
    // biome-ignore lint/performance/useDomNodeTextContent: rendered text is the point
    return `${document.body.innerText}\n${titles.join('\n')}`
  })
}

describe('times on console pages', () => {
  it('the run page: retry time and log instants in the show’s zone, as labelled; no raw ISO', async () => {
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${backoffRun}`)
    await page.getByTestId('next-attempt').waitFor({ timeout: 15_000 })
    await page
      .getByText(/retrying at/)
      .first()
      .waitFor()
    expect(await page.getByTestId('page-zone').textContent()).toBe(
      "Times on this page are in Asia/Tokyo, the show's time zone; yours is Europe/Paris.",
    )
    const text = await readable(page)
    expect(text).not.toMatch(ISO)
    // The log's "retrying at" instant, written in Tokyo time: the same as the step's next attempt.
    const d = await must<{ run: { steps: { wakeAt: string }[] } }>(
      s,
      'query ($id: ID!) { run(id: $id) { steps { wakeAt } } }',
      { id: backoffRun },
    )
    const wake = new Date(d.run.steps[0]?.wakeAt as string)
    const tokyo = new Intl.DateTimeFormat('en-GB', {
      timeZone: 'Asia/Tokyo',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      hourCycle: 'h23',
    }).format(wake)
    expect(await page.getByTestId('next-attempt').textContent()).toContain(tokyo)
    const retryLine = await page.locator('ol.log li', { hasText: 'retrying at' }).first().textContent()
    expect(retryLine).toContain(tokyo)
    // The tooltip of "in 9 min" is in the page's zone too, with its name.
    const title = await page.getByTestId('next-attempt').locator('time[title]').getAttribute('title')
    expect(title).toContain(tokyo)
    expect(title).toMatch(/GMT\+9|JST/)
    await page.context().close()
  })

  it('every other page: no raw ISO instant, and one zone named', async () => {
    const page = await signIn(await newContext(browser), s.url, 'admin')
    const found: Record<string, string[]> = {}
    for (const hash of [
      '#/',
      '#/inbox',
      '#/standby',
      '#/runs',
      `#/runs/${scene.runs[0]}`,
      '#/definitions',
      `#/definitions/${scene.show}`,
      '#/definitions/new',
      '#/keys',
      '#/channels',
    ]) {
      await page.goto(`${s.url}/${hash}`)
      await page.locator('main h1').first().waitFor()
      await page.locator('main [aria-busy="true"]').waitFor({ state: 'detached' })
      const text = await readable(page)
      const problems: string[] = []
      const raw = ISO.exec(text)
      if (raw) problems.push(`raw ISO: …${text.slice(Math.max(0, raw.index - 60), raw.index + 30)}…`)
      if (!/Europe\/Paris|Europe\/London|America\/New_York|Asia\/Tokyo/.test(text))
        problems.push('no zone named')
      if (problems.length > 0) found[hash] = problems
    }
    expect(found).toEqual({})
    await page.context().close()
  })
})
