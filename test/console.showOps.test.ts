/**
 * The calendar and operating many shows in the console (chromium against the
 * real server with its runner): the definition page lists what the schedule
 * will do next (a blackout day with its label) and counts a bulk action
 * before it is confirmed; a failed run's page retries it; a rehearsal at speed
 * shows its show-time clock.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { launchBrowser, newContext, signIn } from './helpers/browser.ts'
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
  s = await startTestServer({
    runner: true,
    env: { MATERIALIZE_HORIZON_HOURS: '96', WEBHOOK_ALLOW: `${receiver.url}/hooks/` },
  })
  browser = await launchBrowser()
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
  await receiver?.close()
})

const day = (offsetDays: number) => new Date(Date.now() + offsetDays * 86_400_000).toISOString().slice(0, 10)
const LOG_ONLY = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'hi' } }] }] }

async function runStatus(id: string): Promise<string> {
  const data = await must<{ run: { status: string } }>(s, 'query ($id: ID!) { run(id: $id) { status } }', {
    id,
  })
  return data.run.status
}

it('the definition page shows a blackout day with its label, and a bulk cancel counted before it is confirmed', async () => {
  const name = unique('dark')
  await must(s, 'mutation ($input: CalendarInput!) { createCalendar(input: $input) { id } }', {
    input: { name, timezone: 'UTC', entries: [{ from: day(2), label: 'Venue closed' }] },
  })
  const id = await createDefinition(s, {
    slug: unique('daily'),
    title: 'Daily show',
    schedule: '0 12 * * *',
    calendars: [name],
    program: LOG_ONLY,
  })
  const made = await eventually(async () => {
    const data = await must<{ runs: { id: string }[] }>(
      s,
      'query ($d: ID!) { runs(definitionId: $d) { id } }',
      { d: id },
    )
    return data.runs.length >= 3 ? data.runs : null
  })
  const page = await signIn(await newContext(browser), s.url, 'operator', `#/definitions/${id}`)
  const upcoming = page.getByRole('list', { name: 'Upcoming occurrences' })
  await upcoming.getByText('Venue closed').waitFor()
  expect(await upcoming.locator('.occ-blackout').count()).toBe(1)
  expect(await upcoming.locator('.occ-scheduled').count()).toBeGreaterThan(1)

  await page.getByRole('button', { name: 'Count' }).click()
  await page.getByText(`${made.length} runs would change`).waitFor()
  // Counting changed nothing.
  expect(await runStatus(made[0]?.id as string)).toBe('SCHEDULED')
  page.once('dialog', (d) => void d.accept())
  await page.getByRole('button', { name: `cancel ${made.length}` }).click()
  await eventually(async () => ((await runStatus(made[0]?.id as string)) === 'CANCELLED' ? true : null))
  await page.context().close()
})

it('a failed run offers a retry, which opens the new run linked to the original', async () => {
  const id = await createDefinition(s, {
    slug: unique('fails'),
    title: 'Fails once',
    program: {
      phases: [
        {
          name: 'main',
          steps: [
            { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/down` }, retry: { attempts: 1 } },
          ],
        },
      ],
    },
  })
  const started = await must<{ startRun: { id: string } }>(
    s,
    'mutation ($d: ID!) { startRun(definitionId: $d) { id } }',
    {
      d: id,
    },
  )
  const runId = started.startRun.id
  await eventually(async () => ((await runStatus(runId)) === 'FAILED' ? true : null))
  const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
  await page.getByRole('button', { name: 'Retry from the failed step' }).click()
  await page.getByText(`Retry of run ${runId}.`).waitFor()
  expect(page.url()).not.toContain(`#/runs/${runId}`)
  await page.context().close()
})

it('a rehearsal at speed shows its show-time clock running at that speed', async () => {
  const id = await createDefinition(s, {
    slug: unique('rehearse'),
    title: 'Long show',
    program: { phases: [{ name: 'main', steps: [{ kind: 'core.wait', params: { seconds: 7200 } }] }] },
  })
  const started = await must<{ startRun: { id: string } }>(
    s,
    'mutation ($d: ID!) { startRun(definitionId: $d, rehearsal: true, speed: 60) { id } }',
    { d: id },
  )
  const page = await signIn(await newContext(browser), s.url, 'viewer', `#/runs/${started.startRun.id}`)
  await page.getByText('rehearsal ×60').waitFor()
  const clock = page.locator('.show-clock')
  // Two real seconds are two show minutes.
  await eventually(
    async () => ((await clock.textContent())?.match(/show time 0:0[2-9]:/) ? true : null),
    10_000,
  )
  await page.context().close()
})
