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
import { eventually, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let browser: Browser
beforeAll(async () => {
  s = await startTestServer({ runner: true })
  browser = await launchBrowser()
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
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
    await eventually(
      async () => (await page.getByRole('heading', { name: 'For another team', exact: true }).count()) === 0,
    )
    await expect(page.getByRole('heading', { name: 'For the operator', exact: true }).count()).resolves.toBe(
      1,
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
    await expect(answer.textContent()).resolves.toContain(`resolved by ${OPERATOR} via console`)
    expect((page as unknown as { outsideRequests: string[] }).outsideRequests).toEqual([])
    await context.close()
  }, 60_000)
})
