/**
 * Authoring in chromium: a new show from the form (cron in words with its next
 * occurrences, program checked by the server with problems at their paths),
 * a second version published with a diff, a run scheduled at a time with a
 * scope and params, a "once at" show; admins only; axe-core clean.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { must } from './helpers/consoleScene.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
beforeAll(async () => {
  ;[s, browser] = await Promise.all([startTestServer(), launchBrowser()])
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
})

/** A datetime-local value for `ms` in the browser's zone (newContext: Europe/Paris). */
function parisLocal(ms: number): string {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-CA', {
      timeZone: 'Europe/Paris',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      hourCycle: 'h23',
    })
      .formatToParts(new Date(ms))
      .map((p) => [p.type, p.value]),
  )
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}`
}

const GOOD = {
  phases: [
    {
      name: 'main',
      steps: [
        { kind: 'core.wait', params: { seconds: 30 } },
        { kind: 'core.cue', params: { prompt: 'Hello {{params.name}}?' } },
      ],
    },
  ],
}

async function setProgram(page: Page, label: string, program: unknown) {
  await page.getByLabel(label).fill(typeof program === 'string' ? program : JSON.stringify(program, null, 2))
}

describe('authoring', () => {
  it('creates a show from the form, publishes a second version, schedules a run with params', async () => {
    const page = await signIn(await newContext(browser), s.url, 'admin', '#/definitions')
    await page.getByRole('link', { name: 'New show' }).click()
    await page.getByRole('heading', { name: 'New show', level: 1 }).waitFor()
    await page.getByLabel('Title').fill('Tonight at the Lido')
    expect(await page.getByLabel(/^Slug/).inputValue()).toBe('tonight-at-the-lido')
    await page.getByLabel('Time zone').fill('Europe/London')
    await page.getByLabel(/^Cron/).fill('0 20 * * 1-5')
    await page.getByTestId('cron-words').getByText('At 20:00, Monday through Friday').waitFor()
    expect(await page.getByTestId('cron-next').locator('li').count()).toBe(5)
    await expect(page.getByTestId('cron-next').locator('li').first().textContent()).resolves.toMatch(
      /20:00:00/,
    )
    // A bad cron says so at once.
    await page.getByLabel(/^Cron/).fill('99 * * * *')
    await page.locator('#show-when ~ * .error, section[aria-labelledby="show-when"] .error').first().waitFor()
    await page.getByLabel(/^Cron/).fill('0 20 * * 1-5')
    await page.getByLabel(/^Scopes/).fill('stalls, balcony')

    // The server's problems, at their paths, as you type; creating waits for a clean answer.
    await setProgram(page, 'Program (JSON)', {
      phases: [{ name: 'main', steps: [{ kind: 'core.nope' }, { kind: 'core.wait', params: {} }] }],
    })
    const problems = page.getByTestId('program-problems')
    await problems.getByText('phases[0].steps[0].kind').waitFor()
    await problems
      .getByText(/phases\[0\]\.steps\[1\]\.params/)
      .first()
      .waitFor()
    expect(await page.getByRole('button', { name: 'Create show' }).isDisabled()).toBe(true)
    await setProgram(page, 'Program (JSON)', '{ "phases": [')
    await problems.getByText(/is not valid JSON/).waitFor()
    await setProgram(page, 'Program (JSON)', GOOD)
    await problems.getByText('The server accepts this program.').waitFor()
    expect(await seriousViolations(page)).toEqual([])
    await page.getByRole('button', { name: 'Create show' }).click()
    await page.getByRole('heading', { name: /Tonight at the Lido/, level: 1 }).waitFor()

    const made = await must<{
      definition: {
        id: string
        schedule: string
        timezone: string
        scopes: string[]
        currentVersion: { version: number }
      }
    }>(
      s,
      '{ definition(slug: "tonight-at-the-lido") { id schedule timezone scopes currentVersion { version } } }',
    )
    expect(made.definition).toMatchObject({
      schedule: '0 20 * * 1-5',
      timezone: 'Europe/London',
      scopes: ['stalls', 'balcony'],
      currentVersion: { version: 1 },
    })

    // A second version: edited, checked, diffed, published.
    await page.getByRole('button', { name: 'Edit the program' }).click()
    const changed = JSON.parse(JSON.stringify(GOOD))
    changed.phases[0].steps[1].params.prompt = 'Curtain up for {{params.name}}?'
    await setProgram(page, 'Program (JSON)', changed)
    await problems.getByText('The server accepts this program.').waitFor()
    const diff = page.getByTestId('program-diff')
    await expect(diff.locator('.del').textContent()).resolves.toContain('Hello {{params.name}}?')
    await expect(diff.locator('.add').textContent()).resolves.toContain('Curtain up for {{params.name}}?')
    await page.getByRole('button', { name: 'Publish version 2' }).click()
    await page.getByText('Version 2 (current)').waitFor()

    // A run at a time, in a scope, with params.
    const at = Math.ceil((Date.now() + 30 * 60_000) / 60_000) * 60_000
    const startForm = page.getByRole('form', { name: 'Start a run' })
    await startForm.getByLabel(/^Scope/).selectOption('balcony')
    await startForm.getByLabel(/^At \(your time/).fill(parisLocal(at))
    await startForm.getByLabel(/^Params/).fill('{"name": "Ada"}')
    await page.getByRole('button', { name: 'Schedule the run' }).click()
    await page.waitForURL(/#\/runs\/\d+$/)
    const runId = page.url().replace(/.*#\/runs\//, '')
    const run = await must<{
      run: {
        status: string
        scope: string
        scheduledFor: string
        params: unknown
        version: { version: number }
      }
    }>(s, 'query ($id: ID!) { run(id: $id) { status scope scheduledFor params version { version } } }', {
      id: runId,
    })
    expect(run.run).toMatchObject({ status: 'SCHEDULED', scope: 'balcony', params: { name: 'Ada' } })
    expect(Date.parse(run.run.scheduledFor)).toBe(at)
    // Bad params are refused in the page, not sent.
    await page.goto(`${s.url}/#/definitions/${made.definition.id}`)
    await page.getByLabel(/^Params/).fill('{name}')
    await page.getByRole('button', { name: 'Start a run now' }).click()
    await page.getByText(/Params are not valid JSON/).waitFor()
    await page.context().close()
  })

  it('"once at" makes a show without a schedule and its one run per scope at that time', async () => {
    const page = await signIn(await newContext(browser), s.url, 'admin', '#/definitions/new')
    await page.getByLabel('Title').fill('Tonight only')
    await page.getByLabel('Once, at a date and time').check()
    const at = Math.ceil((Date.now() + 3 * 3600_000) / 60_000) * 60_000
    await page.getByLabel(/^Runs at/).fill(parisLocal(at))
    await page.getByTestId('program-problems').getByText('The server accepts this program.').waitFor()
    await page.getByRole('button', { name: 'Create show' }).click()
    await page.getByRole('heading', { name: /Tonight only/, level: 1 }).waitFor()
    const d = await eventually(async () => {
      const got = await must<{ definition: { schedule: string | null; id: string } | null }>(
        s,
        '{ definition(slug: "tonight-only") { id schedule } }',
      )
      return got.definition
    })
    expect(d.schedule).toBeNull()
    const runs = await must<{ runs: { scheduledFor: string; status: string }[] }>(
      s,
      'query ($d: ID!) { runs(definitionId: $d) { scheduledFor status } }',
      { d: d.id },
    )
    expect(runs.runs).toEqual([{ scheduledFor: new Date(at).toISOString(), status: 'SCHEDULED' }])
    // Started by hand only: no "Pause schedule" for it.
    expect(await page.getByRole('button', { name: 'Pause schedule' }).count()).toBe(0)
    await page.context().close()
  })

  it('is for admins: an operator sees no New show and no program editor', async () => {
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/definitions')
    await page.getByRole('heading', { name: 'Definitions' }).waitFor()
    await page.locator('main [aria-busy="true"]').waitFor({ state: 'detached' })
    expect(await page.getByRole('link', { name: 'New show' }).count()).toBe(0)
    await page.goto(`${s.url}/#/definitions/new`)
    await page.getByText('Only an admin may create a show.').waitFor()
    await page.context().close()
  })
})
