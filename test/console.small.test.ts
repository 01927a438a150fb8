/**
 * The smaller console fixes in chromium: from a cue's field one Tab reaches
 * Skip, and Skip asks a reason first; the health strip says "Database
 * reachable"; a phone shows no keyboard hints; an address changed the
 * moment the signed-in console first renders is followed.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, PHONE, signIn } from './helpers/browser.ts'
import { createDefinition, must, startRun, waitingCues } from './helpers/consoleScene.ts'
import { unique } from './helpers/fixtures.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
beforeAll(async () => {
  ;[s, browser] = await Promise.all([startTestServer({ runner: true }), launchBrowser()])
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
})

describe('smaller fixes', () => {
  it('Tab from the note reaches Skip; Skip without a reason asks for one', async () => {
    const id = await createDefinition(s, {
      slug: unique('tab'),
      title: 'Tab show',
      program: {
        phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Tab to me?' } }] }],
      },
    })
    const runId = await startRun(s, id)
    const cue = await eventually(async () => (await waitingCues(s)).find((c) => c.run.id === runId) ?? null)
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/inbox')
    const card = page.locator(`[data-cue-id="${cue.id}"]`)
    await card.getByRole('textbox').focus()
    await page.keyboard.press('Tab')
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip')
    await page.keyboard.press('Enter')
    await page.getByText('Write why in the field first, then Skip.').waitFor()
    expect((await waitingCues(s)).some((c) => c.id === cue.id)).toBe(true)
    await card.getByRole('textbox').fill('wrong night')
    await page.keyboard.press('Tab')
    await page.keyboard.press('Enter')
    await card.waitFor({ state: 'detached' })
    const run = await must<{ run: { steps: { cue: { answer: { outcome: string; note: string } } }[] } }>(
      s,
      'query ($id: ID!) { run(id: $id) { steps { cue { answer { outcome note } } } } }',
      { id: runId },
    )
    expect(run.run.steps[0]?.cue.answer).toEqual({ outcome: 'skipped', note: 'wrong night' })
    await page.context().close()
  })

  it('the health strip says what it means; a phone gets no keyboard hints', async () => {
    const page = await signIn(await newContext(browser, { viewport: PHONE }), s.url, 'operator', '#/inbox')
    await page.getByRole('heading', { name: 'Cue inbox' }).waitFor()
    expect(await page.getByText(/Press a to answer/).isVisible()).toBe(false)
    expect(await page.getByRole('button', { name: 'Keys' }).isVisible()).toBe(false)
    await page.goto(`${s.url}/#/`)
    const tile = page.locator('.tile', { hasText: 'Database' })
    await expect(tile.textContent()).resolves.toBe('Databasereachable')
    await page.context().close()
  })

  it('follows an address changed the moment the signed-in console first renders', async () => {
    // The change lands after the first render and before its effects run (a
    // MutationObserver's callback is a microtask of the render): a route
    // that only listens for changes from its effect never hears of it.
    const context = await newContext(browser)
    await context.addInitScript(() => {
      const watch = new MutationObserver(() => {
        if (!document.querySelector('[data-testid="role"]')) return
        watch.disconnect()
        location.hash = '#/standby'
      })
      watch.observe(document, { childList: true, subtree: true })
    })
    const page = await signIn(context, s.url, 'viewer', '#/')
    await page.getByRole('heading', { name: 'Stand-by' }).waitFor({ timeout: 5000 })
    expect(new URL(page.url()).hash).toBe('#/standby')
    await context.close()
  })
})
