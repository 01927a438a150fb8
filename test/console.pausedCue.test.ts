/**
 * The inbox marks the cues of paused runs, in chromium: a pause through the
 * API puts "run paused" on the cue at once, on an open page (no reload);
 * answering it stays allowed and is recorded, and the run goes on only once
 * resumed; a resume takes the mark away. axe-core clean with the mark.
 * Skipping a cue from the inbox is held for an Undo like the run page's skip:
 * undone, the cue still waits; left alone, it is skipped after the window.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { createDefinition, must, startRun } from './helpers/consoleScene.ts'
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

async function run(id: string) {
  return (
    await must<{ run: { status: string; steps: { status: string; parked: boolean }[] } }>(
      s,
      'query ($id: ID!) { run(id: $id) { status steps { status parked } } }',
      { id },
    )
  ).run
}

describe('the inbox and paused runs', () => {
  it('marks a cue whose run is paused, live; the cue can still be answered; resume clears the mark', async () => {
    const prompts = ['Paused show: house lights?', 'Running show: curtain?']
    const runs: string[] = []
    for (const prompt of prompts) {
      const def = await createDefinition(s, {
        slug: unique('paused-cue'),
        title: prompt,
        program: {
          phases: [
            {
              name: 'main',
              steps: [
                { kind: 'core.cue', params: { prompt, timeoutSeconds: 600 } },
                { kind: 'core.cue', params: { prompt: `${prompt} (second)` } },
              ],
            },
          ],
        },
      })
      runs.push(await startRun(s, def))
    }
    for (const id of runs) await eventually(async () => (await run(id)).steps[0]?.parked === true, 15_000)
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/inbox')
    const card = (prompt: string) =>
      page.locator('li.cue', { has: page.getByRole('heading', { name: prompt, exact: true }) })
    await card(prompts[0] as string).waitFor()
    expect(await page.getByTestId('cue-run-paused').count()).toBe(0)

    const paused = await must<{ pauseRun: { applied: boolean } }>(
      s,
      'mutation ($id: ID!) { pauseRun(id: $id) { applied } }',
      { id: runs[0] },
    )
    expect(paused.pauseRun.applied).toBe(true)
    // Marked on the open page, on that cue only.
    const mark = card(prompts[0] as string).getByTestId('cue-run-paused')
    await mark.waitFor({ timeout: 5000 })
    expect(await mark.textContent()).toMatch(/^run paused.*You can still answer/)
    expect(
      await card(prompts[1] as string)
        .getByTestId('cue-run-paused')
        .count(),
    ).toBe(0)
    expect(await seriousViolations(page)).toEqual([])

    // Answering stays allowed: the cue completes, the run stays paused until resumed.
    await card(prompts[0] as string)
      .getByRole('button', { name: 'Resolve' })
      .click()
    await page.getByText(`Resolved: ${prompts[0]}`).waitFor()
    const after = await run(runs[0] as string)
    expect(after.status).toBe('PAUSED')
    expect(after.steps[0]?.status).toBe('COMPLETED')
    expect(after.steps[1]?.status).toBe('PENDING')

    await must(s, 'mutation ($id: ID!) { resumeRun(id: $id) { applied } }', { id: runs[0] })
    const second = card(`${prompts[0]} (second)`)
    await second.waitFor({ timeout: 15_000 })
    expect(await second.getByTestId('cue-run-paused').count()).toBe(0)
    await page.context().close()
  })

  it('holds a cue skip for an Undo: undone, the cue still waits; left alone, it is skipped', async () => {
    const prompt = 'Skippable: confetti?'
    const def = await createDefinition(s, {
      slug: unique('skip-undo'),
      title: prompt,
      program: { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt } }] }] },
    })
    const runId = await startRun(s, def)
    await eventually(async () => (await run(runId)).steps[0]?.parked === true, 15_000)
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/inbox')
    const card = page.locator('li.cue', { has: page.getByRole('heading', { name: prompt, exact: true }) })
    await card.getByLabel(/Note or reason/).fill('no confetti tonight')
    await card.getByRole('button', { name: 'Skip', exact: true }).click()
    await page.getByTestId('undo-toast').waitFor()
    await page.getByRole('button', { name: 'Undo' }).click()
    await page.getByText(`Undone: skipping “${prompt.toLowerCase()}” was not sent.`).waitFor()
    await new Promise((r) => setTimeout(r, 6000))
    expect((await run(runId)).steps[0]).toMatchObject({ status: 'RUNNING', parked: true })

    await card.getByRole('button', { name: 'Skip', exact: true }).click()
    const sent = Date.now()
    const done = await eventually(async () => {
      const r = await run(runId)
      return r.steps[0]?.status === 'SKIPPED' ? r : null
    }, 15_000)
    expect(Date.now() - sent).toBeGreaterThanOrEqual(4500)
    expect(done.steps[0]?.status).toBe('SKIPPED')
    await eventually(async () => (await run(runId)).status === 'COMPLETED', 15_000)
    await page.context().close()
  })
})
