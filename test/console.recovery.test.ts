/**
 * Recovery from the run page in chromium: a failing webhook in backoff is
 * retried now (the receiver answers the second call, and the run completes
 * long before its backoff would have ended), or skipped with a reason and the
 * run goes on; skip and cancel are held for an Undo (undo.tsx): undone (the
 * button, or Escape), nothing is sent; left alone, they land after the window; a failed run is run again from
 * the start, or past its failed step; cancelling asks a reason, which the
 * run keeps (its last error, on its page).
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { createDefinition, must } from './helpers/consoleScene.ts'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver } from './helpers/runnerHarness.ts'
import { eventually, sleep, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
let receiver: WebhookReceiver

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/down', () => ({ status: 500, body: 'down' }))
  // Fails the first call of each idempotency key, answers the next.
  receiver.route('/hooks/flaky', (_call, nth) => (nth === 1 ? { status: 503, body: 'warming up' } : {}))
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
  steps: { seq: number; status: string; kind: string; attempts: number; wakeAt: string | null }[]
  logs: { message: string }[]
}

async function runView(id: string): Promise<RunView> {
  const d = await must<{ run: RunView }>(
    s,
    'query ($id: ID!) { run(id: $id) { status lastError retryOf { id } steps { seq status kind attempts wakeAt } logs(limit: 50) { message } } }',
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
  it('retries a webhook in backoff now: the run completes long before its scheduled retry', async () => {
    const runId = await startShow([
      {
        kind: 'core.webhook',
        params: { url: `${receiver.url}/hooks/flaky` },
        retry: { attempts: 4, backoffSeconds: 900 },
      },
      { kind: 'core.log', params: { message: 'after the hook' } },
    ])
    const backing = await eventually(async () => {
      const st = (await runView(runId)).steps[0]
      return st?.status === 'PENDING' && st.attempts === 1 && st.wakeAt ? st : null
    }, 15_000)
    // Its next attempt is minutes away (900 s, less its jitter).
    expect(Date.parse(backing.wakeAt as string) - Date.now()).toBeGreaterThan(5 * 60_000)
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    const next = page.getByTestId('next-attempt')
    await next.waitFor({ timeout: 15_000 })
    expect(await next.textContent()).toMatch(/next attempt \w{3} \d+ \w{3}, \d\d:\d\d:\d\d \(in \d+ min/)
    expect(await seriousViolations(page)).toEqual([])
    const asked = Date.now()
    await page.getByRole('button', { name: 'Retry now' }).click()
    await page.getByText(/Retrying step 1 now \(attempt 2 of 4\)/).waitFor()
    const done = await eventually(async () => {
      const r = await runView(runId)
      return r.status === 'COMPLETED' ? r : null
    }, 15_000)
    expect(Date.now() - asked).toBeLessThan(15_000)
    expect(done.steps.map((st) => [st.status, st.attempts])).toEqual([
      ['COMPLETED', 2],
      ['COMPLETED', 1],
    ])
    // Two calls of the hook, one failed and one answered, under one idempotency key.
    const calls = receiver.calls.filter((c) => c.path === '/hooks/flaky' && c.key?.startsWith(`${runId}-`))
    expect(calls).toHaveLength(2)
    expect(new Set(calls.map((c) => c.key)).size).toBe(1)
    // The page follows: the button is gone once the step is done.
    await page.locator('.step.st-completed').nth(1).waitFor()
    expect(await page.getByRole('button', { name: 'Retry now' }).count()).toBe(0)
    await page.context().close()
  })

  it('Undo (the button) keeps a skip from being sent; the step is still retrying afterwards', async () => {
    const runId = await startShow([
      {
        kind: 'core.webhook',
        params: { url: `${receiver.url}/hooks/down` },
        retry: { attempts: 10, backoffSeconds: 60 },
      },
    ])
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    await page.getByRole('button', { name: 'Skip step' }).click({ timeout: 15_000 })
    await page.getByLabel('Reason').fill('changed my mind')
    await page.getByRole('button', { name: 'Skip this step' }).click()
    const toast = page.getByTestId('undo-toast')
    await toast.waitFor()
    expect(await toast.textContent()).toMatch(/Skipping step 1\s*in [1-5] s\s*Undo/)
    // The Undo takes the focus, so a keyboard user reaches it at once.
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Undo')
    expect(await seriousViolations(page)).toEqual([])
    await page.getByRole('button', { name: 'Undo' }).click()
    await page.getByText('Undone: skipping step 1 was not sent.').waitFor()
    await sleep(6000)
    const r = await runView(runId)
    expect(r.steps[0]?.status).toBe('PENDING')
    expect(JSON.stringify(r.logs)).not.toContain('skip step')
    await page.context().close()
  })

  it('Escape undoes a cancel; a cancel left alone lands only after the window', async () => {
    const runId = await startShow([{ kind: 'core.wait', params: { seconds: 3600 } }])
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    await page.getByRole('button', { name: 'Cancel run' }).click()
    await page.getByLabel('Reason').fill('not really')
    await page.getByRole('button', { name: 'Cancel the run' }).click()
    await page.getByTestId('undo-toast').waitFor()
    await page.keyboard.press('Escape')
    await page.getByText('Undone: cancelling the run was not sent.').waitFor()
    await sleep(6000)
    expect((await runView(runId)).status).toBe('RUNNING')

    await page.getByRole('button', { name: 'Cancel run' }).click()
    await page.getByLabel('Reason').fill('for real')
    const sent = Date.now()
    await page.getByRole('button', { name: 'Cancel the run' }).click()
    await sleep(2500)
    // Still inside the window: nothing sent yet.
    expect((await runView(runId)).status).toBe('RUNNING')
    const r = await eventually(async () => {
      const v = await runView(runId)
      return v.status === 'CANCELLED' ? v : null
    }, 15_000)
    expect(Date.now() - sent).toBeGreaterThanOrEqual(4500)
    expect(r.lastError).toMatch(/: for real$/)
    await page.context().close()
  })

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
    // Held for an Undo first, then sent.
    await page.getByTestId('undo-toast').waitFor()
    await page.getByText('Step skipped.').waitFor({ timeout: 15_000 })
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
    }, 15_000)
    expect(r.lastError).toMatch(/^cancelled by \S+: storm warning$/)
    await page.getByText(/Last error: cancelled by \S+: storm warning/).waitFor()
    await page.context().close()
  })
})
