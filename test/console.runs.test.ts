/**
 * The runs page in chromium over 10,000 runs: filters (status, show, scope,
 * scheduled range in the viewer's zone, rehearsal) answer what SQL says,
 * cursor paging forward and back, a new run appears without a reload, bulk
 * actions count before they act (operators only), axe-core clean.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SqlValue } from '../sql/db.ts'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { type DefinitionFixture, makeDefinition } from './helpers/fixtures.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

const RUNS = 10_000
/** The newest run is scheduled here; each older one a minute before. */
const BASE = Date.parse('2031-03-01T12:00:00.000Z')

let s: TestServer
let browser: Browser
let gala: DefinitionFixture
let matinee: DefinitionFixture

beforeAll(async () => {
  s = await startTestServer()
  ;[gala, matinee, browser] = await Promise.all([
    makeDefinition(s.t.db, { title: 'Gala night', slug: 'gala' }),
    makeDefinition(s.t.db, { title: 'Matinee', slug: 'matinee' }),
    launchBrowser(),
  ])
  // Set-wise, from MariaDB's sequence engine: one minute apart, two shows,
  // three scopes, one in 10 failed (the rest completed), one in 7 a rehearsal.
  await s.t.db.query(
    `INSERT INTO event_runs (definition_id, version_id, scope, scheduled_for, timezone, rehearsal, status, started_by, ended_at)
     SELECT IF(seq % 2 = 0, ?, ?), IF(seq % 2 = 0, ?, ?),
            ELT(1 + seq % 3, '', 'north', 'south'),
            ? - INTERVAL seq MINUTE, 'UTC', IF(seq % 7 = 0, 1, 0),
            IF(seq % 10 = 3, 'failed', 'completed'), 'schedule', ? - INTERVAL seq MINUTE
       FROM seq_0_to_${RUNS - 1}`,
    [gala.def.id, matinee.def.id, gala.version.id, matinee.version.id, new Date(BASE), new Date(BASE)],
  )
}, 120_000)

afterAll(async () => {
  await browser?.close()
  await s?.close()
})

async function count(where: string, args: SqlValue[] = []): Promise<number> {
  const rows = await s.t.db.query<{ n: number }>(`SELECT COUNT(*) AS n FROM event_runs WHERE ${where}`, args)
  return Number(rows[0]?.n)
}

const rows = (page: Page) => page.getByTestId('runs').locator('tbody tr')
const firstRowLink = async (page: Page) => (await rows(page).first().locator('a').getAttribute('href')) ?? ''

/** Wait until the table's first row changes from `before` (a new page, a new filter). */
async function changedFrom(page: Page, before: string): Promise<void> {
  await eventually(async () => ((await firstRowLink(page)) !== before ? true : null), 10_000)
}

describe('the runs page', () => {
  it('pages forward and back by cursor, 50 a page, newest first', async () => {
    const page = await signIn(await newContext(browser), s.url, 'viewer', '#/runs')
    await rows(page).first().waitFor()
    expect(await rows(page).count()).toBe(50)
    const first = await firstRowLink(page)
    const newest = await s.t.db.query<{ id: number }>(
      'SELECT id FROM event_runs ORDER BY scheduled_for DESC, id DESC LIMIT 1',
    )
    expect(first).toBe(`#/runs/${newest[0]?.id}`)
    // The newest run, at 13:00 in Paris (the browser's zone), labelled as such.
    expect(await page.getByRole('columnheader', { name: 'Scheduled (Europe/Paris)' }).count()).toBe(1)
    await expect(rows(page).first().locator('td').nth(3).textContent()).resolves.toContain('13:00:00')
    expect(await page.getByRole('button', { name: 'Previous page' }).isDisabled()).toBe(true)
    await page.getByRole('button', { name: 'Next page' }).click()
    await changedFrom(page, first)
    await page.getByRole('heading', { name: 'Runs, newest first (page 2)' }).waitFor()
    const second = await firstRowLink(page)
    const fifty = await s.t.db.query<{ id: number }>(
      'SELECT id FROM event_runs ORDER BY scheduled_for DESC, id DESC LIMIT 1 OFFSET 50',
    )
    expect(second).toBe(`#/runs/${fifty[0]?.id}`)
    await page.getByRole('button', { name: 'Previous page' }).click()
    await changedFrom(page, second)
    expect(await firstRowLink(page)).toBe(first)
    // A viewer has no bulk actions.
    expect(await page.getByRole('heading', { name: 'Act on every run the filter selects' }).count()).toBe(0)
    await page.context().close()
  })

  it('filters by status, show, scope, rehearsal and scheduled range, as SQL counts', async () => {
    const page = await signIn(await newContext(browser), s.url, 'viewer', '#/runs')
    await rows(page).first().waitFor()
    const before = await firstRowLink(page)
    await page.getByLabel('Status').selectOption('FAILED')
    await page.getByLabel('Show').selectOption({ label: 'Matinee (matinee)' })
    await page.getByLabel('Scope').fill('north')
    await page.getByLabel('Rehearsals').selectOption('none')
    // 13:00 Paris is 12:00 UTC (BASE): from BASE − 600 min, until BASE − 300 min.
    await page.getByLabel(/Scheduled from/).fill('2031-03-01T03:00')
    await page.getByLabel(/^until/).fill('2031-03-01T08:00')
    await changedFrom(page, before)
    const expected = await count(
      `status = 'failed' AND definition_id = ? AND scope = 'north' AND rehearsal = 0
       AND scheduled_for >= ? AND scheduled_for < ?`,
      [matinee.def.id, new Date(BASE - 600 * 60_000), new Date(BASE - 300 * 60_000)],
    )
    expect(expected).toBeGreaterThan(0)
    await eventually(async () => ((await rows(page).count()) === expected ? true : null), 10_000)
    for (const text of await rows(page).allTextContents()) {
      expect(text).toContain('Matinee')
      expect(text).toContain('north')
      expect(text).toContain('failed')
      expect(text).not.toContain('rehearsal')
    }
    expect(await page.getByRole('button', { name: 'Next page' }).isDisabled()).toBe(true)
    // A filter nothing matches says so.
    await page.getByLabel('Scope').fill('nowhere')
    await page.getByText('No run matches.').waitFor()
    await page.getByRole('button', { name: 'Clear filters' }).click()
    await eventually(async () => ((await rows(page).count()) === 50 ? true : null))
    await page.context().close()
  })

  it('a run started elsewhere appears without a reload', async () => {
    const page = await signIn(await newContext(browser), s.url, 'viewer', '#/runs?scope=live-one')
    await page.getByText('No run matches.').waitFor()
    const res = await s.gql<{ startRun: { id: string } }>(
      'mutation ($d: ID!) { startRun(definitionId: $d, scope: "live-one", at: "2040-01-01T00:00:00Z") { id } }',
      { variables: { d: String(gala.def.id) }, auth: 'operator' },
    )
    expect(res.body.errors).toBeUndefined()
    await page.locator(`a[href="#/runs/${res.body.data?.startRun.id}"]`).waitFor({ timeout: 15_000 })
    await page.context().close()
  })

  it('bulk: counts the runs the filter selects, then cancels them on confirmation', async () => {
    for (let i = 0; i < 12; i++)
      await s.gql(
        'mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, scope: "bulk", at: $at) { id } }',
        {
          variables: { d: String(matinee.def.id), at: new Date(Date.UTC(2041, 0, 1 + i)).toISOString() },
          auth: 'operator',
        },
      )
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/runs?scope=bulk')
    await eventually(async () => ((await rows(page).count()) === 12 ? true : null), 10_000)
    await page.getByLabel('Action').selectOption('CANCEL')
    await page.getByLabel(/^Reason/).fill('venue closed')
    await page.getByRole('button', { name: 'Count the runs' }).click()
    await page.getByTestId('bulk-count').getByText('12 runs would be cancelled.').waitFor()
    // Counting changed nothing.
    expect(await count(`scope = 'bulk' AND status = 'scheduled'`)).toBe(12)
    await page.getByRole('button', { name: 'Cancel 12 runs' }).click()
    await page.getByText('Cancelled 12 runs.').waitFor()
    expect(await count(`scope = 'bulk' AND status = 'cancelled'`)).toBe(12)
    await eventually(async () =>
      (await page.getByTestId('runs').getByText('cancelled').count()) === 12 ? true : null,
    )
    // An empty filter is refused by the server, and the page says why.
    await page.getByRole('button', { name: 'Clear filters' }).click()
    await page.getByRole('button', { name: 'Count the runs' }).click()
    await page.locator('#bulk ~ * .error, section[aria-labelledby="bulk"] .error').first().waitFor()
    expect(await count(`status = 'cancelled'`)).toBe(12)
    await page.context().close()
  })

  it('has no serious or critical axe-core violation', async () => {
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/runs')
    await rows(page).first().waitFor()
    expect(await seriousViolations(page)).toEqual([])
    // The nav marks Runs as the current page, and a run's page too.
    expect(await page.getByRole('link', { name: 'Runs', exact: true }).getAttribute('aria-current')).toBe(
      'page',
    )
    await page.goto(`${s.url}/${await firstRowLink(page)}`)
    await page.locator('main h1').first().waitFor()
    expect(await page.getByRole('link', { name: 'Runs', exact: true }).getAttribute('aria-current')).toBe(
      'page',
    )
    expect(await page.getByRole('link', { name: 'Board', exact: true }).getAttribute('aria-current')).toBe(
      null,
    )
    await page.context().close()
  })
})
