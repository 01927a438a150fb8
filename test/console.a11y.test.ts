/**
 * axe-core (from node_modules, evaluated in the page: no CDN) on every console
 * page, light and dark, at 1280×800 and on a phone-width screen: no serious
 * or critical violation.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DESKTOP, launchBrowser, newContext, PHONE, seriousViolations, signIn } from './helpers/browser.ts'
import { buildScene, createDefinition, must, startRun, waitingCues } from './helpers/consoleScene.ts'
import { startReceiver, type WebhookReceiver } from './helpers/runnerHarness.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let receiver: WebhookReceiver
let pages: [string, string][]

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/', () => ({ status: 503 }))
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } })
  browser = await launchBrowser()
  const scene = await buildScene(s)
  // States worth checking too: a paused run's cue in the inbox, a step in backoff (Retry now).
  const late = await createDefinition(s, {
    slug: 'late-show',
    title: 'Late show',
    program: { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Encore?' } }] }] },
  })
  const lateRun = await startRun(s, late)
  const hook = await createDefinition(s, {
    slug: 'hook',
    title: 'Hook',
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            {
              kind: 'core.webhook',
              params: { url: `${receiver.url}/hooks/x` },
              retry: { attempts: 3, backoffSeconds: 600 },
            },
          ],
        },
      ],
    },
  })
  const hookRun = await startRun(s, hook)
  await eventually(async () => (await waitingCues(s)).length >= 3)
  await must(s, 'mutation ($id: ID!) { pauseRun(id: $id) { applied } }', { id: lateRun })
  await eventually(() => receiver.calls.length >= 1)
  pages = [
    ['board', '#/'],
    ['inbox', '#/inbox'],
    ['stand-by', '#/standby'],
    ['run', `#/runs/${scene.runs[0]}`],
    ['run in backoff', `#/runs/${hookRun}`],
    ['runs', '#/runs'],
    ['definitions', '#/definitions'],
    ['definition', `#/definitions/${scene.show}`],
    ['new show', '#/definitions/new'],
    ['keys', '#/keys'],
    ['channels', '#/channels'],
  ]
})

afterAll(async () => {
  await browser?.close()
  await s?.close()
  await receiver?.close()
})

describe('accessibility (axe-core)', () => {
  it('the sign-in page has no serious or critical violation', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    await page.goto(`${s.url}/`)
    await page.getByLabel('Access token').waitFor()
    expect(await seriousViolations(page)).toEqual([])
    // The check can fail: a nameless button planted in the page is found.
    await page.evaluate(() => document.body.append(document.createElement('button')))
    expect((await seriousViolations(page)).map((v) => v.id)).toContain('button-name')
    await context.close()
  })

  for (const [viewport, colorScheme] of [
    [DESKTOP, 'light'],
    [DESKTOP, 'dark'],
    [PHONE, 'light'],
  ] as const) {
    it(`every page at ${viewport.width}×${viewport.height}, ${colorScheme}: no serious or critical violation`, async () => {
      const context = await newContext(browser, { viewport, colorScheme })
      const page = await signIn(context, s.url, 'admin')
      const found: Record<string, unknown> = {}
      for (const [name, hash] of pages) {
        await page.goto(`${s.url}/${hash}`)
        await page.locator('main h1').first().waitFor()
        await page.locator('main [aria-busy="true"]').waitFor({ state: 'detached' })
        const violations = await seriousViolations(page)
        if (violations.length > 0) found[name] = violations
      }
      if (viewport.width > 760) {
        // The keyboard-shortcut panel too.
        await page.getByRole('button', { name: 'Keys' }).click()
        const withHelp = await seriousViolations(page)
        if (withHelp.length > 0) found['shortcuts'] = withHelp
      } else {
        // A phone gets no keyboard hints.
        expect(await page.getByRole('button', { name: 'Keys' }).isVisible()).toBe(false)
      }
      expect(found).toEqual({})
      await context.close()
    })
  }
})
