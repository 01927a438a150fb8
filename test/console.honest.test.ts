/**
 * Honest state in chromium: a run a person scheduled (`startRun(at:)`) is in
 * the board's "Next up" and in Stand-by; a cue going live stays in Stand-by as
 * "waiting now" with a countdown to its deadline; the run page tells an
 * answered cue (by whom) from a skipped and a timed-out one; the run page
 * shows one time zone, the show's, labelled, with the viewer's beside it.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { createDefinition, must } from './helpers/consoleScene.ts'
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

const cueProgram = (prompt: string, extra: Record<string, unknown> = {}) => ({
  phases: [
    {
      name: 'main',
      steps: [
        { kind: 'core.wait', params: { seconds: 120 } },
        { kind: 'core.cue', params: { prompt, ...extra } },
      ],
    },
  ],
})

async function start(definitionId: string, vars: Record<string, unknown> = {}) {
  const d = await must<{ startRun: { id: string; startedBy: string } }>(
    s,
    'mutation ($d: ID!, $at: DateTime, $s: String) { startRun(definitionId: $d, at: $at, scope: $s) { id startedBy } }',
    { d: definitionId, ...vars },
  )
  return d.startRun
}

async function waitingStep(runId: string): Promise<string> {
  return eventually(async () => {
    const d = await must<{ run: { steps: { id: string; kind: string; parked: boolean }[] } }>(
      s,
      'query ($id: ID!) { run(id: $id) { steps { id kind parked } } }',
      { id: runId },
    )
    return d.run.steps.find((st) => st.kind === 'core.cue' && st.parked)?.id ?? null
  }, 15_000)
}

describe('honest state', () => {
  it('a run a person scheduled is in Next up and in Stand-by, with who scheduled it', async () => {
    const id = await createDefinition(s, {
      slug: unique('later'),
      title: 'Late show',
      program: cueProgram('Dim the lights?'),
    })
    const at = new Date(Date.now() + 10 * 60_000).toISOString()
    const run = await start(id, { at, s: 'balcony' })
    const page = await signIn(await newContext(browser), s.url, 'viewer', '#/')
    const next = page.getByTestId('next-up-run')
    await next.first().waitFor()
    await expect(next.first().textContent()).resolves.toContain(`scheduled by ${run.startedBy}`)
    expect(await page.locator(`a[href="#/runs/${run.id}"]`).count()).toBe(1)
    await page.getByRole('heading', { name: 'Next up (your time, Europe/Paris)' }).waitFor()

    await page.goto(`${s.url}/#/standby`)
    const row = page.locator('li.row', { hasText: 'Dim the lights?' })
    await row.waitFor()
    // Its first cue: the scheduled time plus the two-minute wait before it.
    await expect(row.textContent()).resolves.toMatch(/in about 1[12] min/)
    await expect(row.getByTestId('scheduled-by').textContent()).resolves.toContain(run.startedBy)
    expect(await seriousViolations(page)).toEqual([])
    await page.context().close()
  })

  it('a cue going live stays in Stand-by as waiting now, with a countdown to its deadline', async () => {
    const id = await createDefinition(s, {
      slug: unique('live'),
      title: 'Live cue',
      program: {
        phases: [
          {
            name: 'main',
            steps: [{ kind: 'core.cue', params: { prompt: 'Raise the curtain?', timeoutSeconds: 600 } }],
          },
        ],
      },
    })
    const run = await start(id)
    await waitingStep(run.id)
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/standby')
    const row = page.locator('li.row', { hasText: 'Raise the curtain?' })
    await row.waitFor()
    await expect(row.textContent()).resolves.toMatch(/waiting now — answer \(a\)/)
    await expect(row.textContent()).resolves.toMatch(/times out in (9 min|10 min)/)
    expect(await page.getByText('No run in progress or scheduled has a cue ahead.').count()).toBe(0)
    await page.context().close()
  })

  it('answered (by whom), skipped and timed out read differently on the run page, in the show’s zone', async () => {
    const id = await createDefinition(s, {
      slug: unique('outcomes'),
      title: 'Outcomes',
      timezone: 'America/New_York',
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.cue', params: { prompt: 'Answer me', timeoutSeconds: 300 } },
              { kind: 'core.cue', params: { prompt: 'Skip me' } },
              {
                kind: 'core.cue',
                params: { prompt: 'Let me time out', timeoutSeconds: 1, onTimeout: 'continue' },
              },
            ],
          },
        ],
      },
    })
    const run = await start(id)
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${run.id}`)
    // While the first cue waits: its countdown.
    await page
      .getByTestId('cue-deadline')
      .getByText(/times out in [45] min/)
      .waitFor({ timeout: 15_000 })
    const first = await waitingStep(run.id)
    await must(s, 'mutation ($id: ID!) { resolveCue(stepId: $id, note: "go") { applied } }', { id: first })
    const second = await eventually(async () => {
      const id2 = await waitingStep(run.id)
      return id2 !== first ? id2 : null
    })
    await must(s, 'mutation ($id: ID!) { skipStep(stepId: $id, reason: "not tonight") { applied } }', {
      id: second,
    })
    const outcomes = page.getByTestId('cue-outcome')
    await eventually(async () => ((await outcomes.count()) === 3 ? true : null), 20_000)
    expect(await outcomes.allTextContents()).toEqual(['answered', 'skipped', 'timed out'])
    const answers = await page.getByTestId('cue-answer').allTextContents()
    expect(answers[0]).toMatch(/^answered by \S+ via api/)
    expect(answers[1]).toMatch(/^skipped by \S+ via api/)
    expect(answers[2]).toMatch(/^timed out, nobody answered/)
    // The run completed, but no cue reads "completed".
    expect(await page.locator('.timeline .badge', { hasText: 'completed' }).count()).toBe(0)
    await expect(page.getByTestId('page-zone').textContent()).resolves.toBe(
      "Times on this page are in America/New_York, the show's time zone; yours is Europe/Paris.",
    )
    expect(await seriousViolations(page)).toEqual([])
    await page.context().close()
  })
})
