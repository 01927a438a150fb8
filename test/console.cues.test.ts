/**
 * The console and the cue ladder, in chromium: "Mine only" in the inbox, the
 * opt-in alert for new cues that are mine, an answer recorded `via: console`,
 * and the ladder (who it is for, who answered and how) on the run page.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { tokenActor } from '../src/auth.ts'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { createDefinition, startRun } from './helpers/consoleScene.ts'
import { unique } from './helpers/fixtures.ts'
import { type Receiver, startReceiver } from './helpers/receiver.ts'
import { eventually, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let rx: Receiver
beforeAll(async () => {
  rx = await startReceiver()
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${rx.url}/`, NOTIFY_POLL_MS: '50' } })
  browser = await launchBrowser()
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await rx?.close()
})

const OPERATOR = tokenActor('operator', TOKENS.operator)

async function cue(prompt: string, params: Record<string, unknown> = {}): Promise<string> {
  const slug = unique('show')
  const def = await createDefinition(s, {
    slug,
    title: `Show ${prompt}`,
    program: { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt, ...params } }] }] },
  })
  return startRun(s, def, unique('scope'))
}

describe('the console and cues', () => {
  it('shows only my cues with "Mine only", alerts on a new one of mine, and records the answer via console', async () => {
    const mineRun = await cue('For the operator', { assignee: OPERATOR })
    await cue('For another team', { assignee: 'team:other' })
    const context = await newContext(browser)
    await context.grantPermissions(['notifications'])
    const page = await signIn(context, s.url, 'operator', '#/inbox')
    await page.getByRole('heading', { name: 'For another team', exact: true }).waitFor()
    await page.getByRole('heading', { name: 'For the operator', exact: true }).waitFor()
    await page.getByTestId('inbox-mine').check()
    const heading = (name: string) => page.getByRole('heading', { name, exact: true })
    await eventually(
      async () =>
        (await heading('For the operator').count()) === 1 &&
        (await heading('For another team').count()) === 0,
    )
    await expect(page.getByTestId('cue-ladder').first().textContent()).resolves.toContain(`for ${OPERATOR}`)
    expect(await seriousViolations(page)).toEqual([])

    await page.getByTestId('cue-alerts').click()
    await expect(page.getByTestId('cue-alerts').getAttribute('aria-pressed')).resolves.toBe('true')
    // Give the watcher its first inbox (what was waiting already is not news).
    await page.waitForTimeout(500)
    await cue('Another for the operator', { assignee: OPERATOR })
    await cue('Not mine either', { assignee: 'team:other' })
    await eventually(
      async () => (await page.evaluate(() => document.documentElement.dataset.cueAlerts)) === '1',
      10_000,
    )
    await page.waitForTimeout(500)
    expect(await page.evaluate(() => document.documentElement.dataset.cueAlerts)).toBe('1')

    const card = page.locator('li.cue', {
      has: page.getByRole('heading', { name: 'For the operator', exact: true }),
    })
    await card.getByRole('button', { name: 'Resolve' }).click()
    await page.goto(`${s.url}/#/runs/${mineRun}`)
    const answer = page.getByTestId('cue-answer')
    await answer.waitFor()
    await expect(answer.textContent()).resolves.toContain(`answered by ${OPERATOR} via console`)
    expect((page as unknown as { outsideRequests: string[] }).outsideRequests).toEqual([])
    await context.close()
  }, 60_000)

  it('gives admins a channels page: test a channel, see the delivery, redeliver it', async () => {
    const res = await s.gql<{ createNotificationChannel: { id: string } }>(
      'mutation ($input: NotificationChannelInput!) { createNotificationChannel(input: $input) { id } }',
      {
        variables: {
          input: { name: 'stage-hook', kind: 'WEBHOOK', target: `${rx.url}/stage`, events: ['CUE_WAITING'] },
        },
      },
    )
    expect(res.body.errors).toBeUndefined()
    const operator = await signIn(await newContext(browser), s.url, 'operator')
    await expect(operator.getByRole('link', { name: 'Channels' }).count()).resolves.toBe(0)
    await operator.context().close()

    const page = await signIn(await newContext(browser), s.url, 'admin', '#/channels')
    const card = page.locator('[data-channel-id]', { hasText: 'stage-hook' })
    await card.waitFor()
    expect(await seriousViolations(page)).toEqual([])
    await card.getByRole('button', { name: 'Send a test' }).click()
    const delivery = page.locator('[data-delivery-id]', { hasText: 'TEST' })
    await eventually(
      async () =>
        (await delivery.count()) > 0 ? /delivered/.test((await delivery.first().textContent()) ?? '') : false,
      10_000,
    )
    expect(rx.requests.filter((r) => r.path === '/stage')).toHaveLength(1)
    await delivery.first().getByRole('button', { name: 'Redeliver' }).click()
    await eventually(() => rx.requests.filter((r) => r.path === '/stage').length === 2, 10_000)
    const ids = rx.requests.filter((r) => r.path === '/stage').map((r) => r.headers['webhook-id'])
    expect(ids[0]).toBe(ids[1])
    await page.context().close()
  }, 60_000)
})
