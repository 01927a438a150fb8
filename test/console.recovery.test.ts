/**
 * Recovery from the run page in chromium: a failing webhook in backoff is
 * skipped with a reason and the run goes on; a failed run is run again from
 * the start, or past its failed step; cancelling asks a reason, which the
 * run keeps (its last error, on its page).
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { createDefinition, must } from './helpers/consoleScene.ts'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver } from './helpers/runnerHarness.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let receiver: WebhookReceiver

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/down', () => ({ status: 500, body: 'down' }))
  ;[s, browser] = await Promise.all([
    startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } }),
    launchBrowser(),
  ])
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await receiver?.close()
})

interface RunView {
  status: string
  lastError: string | null
  retryOf: { id: string } | null
  steps: { seq: number; status: string; kind: string }[]
  logs: { message: string }[]
}

async function runView(id: string): Promise<RunView> {
  const d = await must<{ run: RunView }>(
    s,
    'query ($id: ID!) { run(id: $id) { status lastError retryOf { id } steps { seq status kind } logs(limit: 50) { message } } }',
    { id },
  )
  return d.run
}

async function startShow(steps: unknown[]): Promise<string> {
  const id = await createDefinition(s, {
    slug: unique('recover'),
    title: 'Recovery',
    program: { phases: [{ name: 'main', steps }] },
  })
  const d = await must<{ startRun: { id: string } }>(
    s,
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    {
      d: id,
    },
  )
  return d.startRun.id
}

describe('recovery on the run page', () => {
  it('skips a failing webhook in backoff, with a reason, and the run goes on', async () => {
    const runId = await startShow([
      {
        kind: 'core.webhook',
        params: { url: `${receiver.url}/hooks/down` },
        retry: { attempts: 10, backoffSeconds: 60 },
      },
      { kind: 'core.log', params: { message: 'after the hook' } },
    ])
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    await page.getByRole('button', { name: 'Skip step' }).click({ timeout: 15_000 })
    expect(await page.getByRole('button', { name: 'Skip this step' }).isDisabled()).toBe(true)
    await page.getByLabel('Reason').fill('the lights vendor is down tonight')
    expect(await seriousViolations(page)).toEqual([])
    await page.getByRole('button', { name: 'Skip this step' }).click()
    await page.getByText('Step skipped.').waitFor()
    const done = await eventually(async () => {
      const r = await runView(runId)
      return r.status === 'COMPLETED' ? r : null
    }, 15_000)
    expect(done.steps.map((st) => st.status)).toEqual(['SKIPPED', 'COMPLETED'])
    expect(JSON.stringify(done.logs)).toContain('the lights vendor is down tonight')
    await page.context().close()
  })

  it('a failed run: skip the failed step and go on, or run it again from the start', async () => {
    const steps = [
      { kind: 'core.log', params: { message: 'first' } },
      { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/down` }, retry: { attempts: 1 } },
      { kind: 'core.log', params: { message: 'last' } },
    ]
    const failed = [await startShow(steps), await startShow(steps)]
    for (const id of failed)
      await eventually(async () => ((await runView(id)).status === 'FAILED' ? true : null), 15_000)
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${failed[0]}`)
    await page.getByRole('button', { name: 'Skip the failed step and go on' }).click()
    await page.getByText(`Retry of run ${failed[0]}.`).waitFor()
    const past = page.url().replace(/.*#\/runs\//, '')
    const pastRun = await eventually(async () => {
      const r = await runView(past)
      return r.status === 'COMPLETED' ? r : null
    }, 15_000)
    expect(pastRun.steps.map((st) => st.status)).toEqual(['SKIPPED', 'SKIPPED', 'COMPLETED'])

    await page.goto(`${s.url}/#/runs/${failed[1]}`)
    await page.getByRole('button', { name: 'Run again from the start' }).click()
    await page.getByText(`Retry of run ${failed[1]}.`).waitFor()
    const again = page.url().replace(/.*#\/runs\//, '')
    const againRun = await eventually(async () => {
      const r = await runView(again)
      return r.status === 'FAILED' ? r : null
    }, 15_000)
    // From the start: the first log ran again, and the hook was tried again.
    expect(againRun.steps.map((st) => st.status)).toEqual(['COMPLETED', 'FAILED', 'CANCELLED'])
    expect(againRun.retryOf?.id).toBe(failed[1])
    await page.context().close()
  })

  it('cancelling a run asks a reason, which the run keeps and its page shows', async () => {
    const runId = await startShow([{ kind: 'core.wait', params: { seconds: 3600 } }])
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    await page.getByRole('button', { name: 'Cancel run' }).click()
    await page.getByLabel('Reason').fill('storm warning')
    await page.getByRole('button', { name: 'Cancel the run' }).click()
    const r = await eventually(async () => {
      const v = await runView(runId)
      return v.status === 'CANCELLED' ? v : null
    })
    expect(r.lastError).toMatch(/^cancelled by \S+: storm warning$/)
    await page.getByText(/Last error: cancelled by \S+: storm warning/).waitFor()
    await page.context().close()
  })
})
