/**
 * The operator console in a real browser (Debian's chromium via playwright-core)
 * against a real server with its runner: sign-in, the live inbox across two
 * consoles, the live board, role-aware controls. Accessibility is in
 * console.a11y.test.ts.
 */
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser, newContext, signIn, waitOrExplain } from './helpers/browser.ts'
import { createDefinition, startRun, waitingCues } from './helpers/consoleScene.ts'
import { eventually, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

/** One cue, then a long wait so the run stays in progress after the cue. */
const CUE_PROGRAM = {
  phases: [
    {
      name: 'gates',
      steps: [
        { kind: 'core.cue', params: { prompt: 'Open the gates?' } },
        { kind: 'core.wait', params: { seconds: 3600 } },
      ],
    },
  ],
}

let s: TestServer
let browser: Browser
let definitionId: string

beforeAll(async () => {
  s = await startTestServer({ runner: true })
  browser = await launchBrowser()
  definitionId = await createDefinition(s, {
    slug: 'gates',
    title: 'Gates',
    scopes: ['north', 'south', 'east', 'west'],
    program: CUE_PROGRAM,
  })
})

afterAll(async () => {
  await browser?.close()
  await s?.close()
})

async function pollMsOf(page: Page): Promise<number> {
  return Number(await page.locator('meta[name="showrunner-poll-ms"]').getAttribute('content'))
}

/** A fresh run parked on its cue; answers the cue's step id. */
async function parkedCue(scope: string): Promise<{ runId: string; stepId: string }> {
  const runId = await startRun(s, definitionId, scope)
  const cue = await eventually(async () => (await waitingCues(s)).find((c) => c.run.id === runId))
  return { runId, stepId: cue.id }
}

describe('the console', () => {
  it('is served at / without a token, from this server only; every request it makes needs one', async () => {
    const res = await fetch(`${s.url}/`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/text\/html/)
    expect(res.headers.get('content-security-policy')).toContain("script-src 'self'")
    const html = await res.text()
    expect(html).not.toMatch(/https?:\/\//)
    const js = await fetch(`${s.url}${/src="([^"]+)"/.exec(html)?.[1]}`)
    expect(js.status).toBe(200)
    expect(js.headers.get('content-type')).toMatch(/javascript/)
    const anonymous = await fetch(s.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: '{ viewer { role } }' }),
    })
    expect(anonymous.status).toBe(401)
  })

  it('signs in with a token kept for this tab only, and refuses a wrong one', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    await page.goto(`${s.url}/`)
    await page.getByLabel('Access token').fill('not-a-token-at-all-0000')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/^Not a token this server knows/)

    await page.getByLabel('Access token').fill(TOKENS.operator)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('heading', { name: 'Board' }).waitFor()
    expect(await page.getByTestId('role').textContent()).toBe('operator')
    // A reload keeps the tab signed in; another tab starts signed out.
    await page.reload()
    await page.getByRole('heading', { name: 'Board' }).waitFor()
    const other = await context.newPage()
    await other.goto(`${s.url}/`)
    await other.getByLabel('Access token').waitFor()
    expect(await other.evaluate(() => sessionStorage.length)).toBe(0)
    // Signing out forgets the token.
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByLabel('Access token').waitFor()
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0)
    expect((page as Page & { outsideRequests?: string[] }).outsideRequests ?? []).toEqual([])
    await context.close()
  })

  it('signing out right after a reload stays signed out (the reload’s check of the token does not sign back in)', async () => {
    const context = await newContext(browser)
    const page = await signIn(context, s.url, 'operator', '#/')
    await page.reload()
    await page.getByRole('heading', { name: 'Board' }).waitFor()
    // Within the second the console waits before it confirms a remembered token.
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByLabel('Access token').waitFor()
    await page.waitForTimeout(1500)
    expect(await page.getByLabel('Access token').isVisible()).toBe(true)
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0)
    await context.close()
  })

  it('two consoles watch the inbox: one resolves a cue, the other sees it go within the poll interval + 100 ms', async () => {
    const { stepId } = await parkedCue('north')
    const a = await signIn(await newContext(browser), s.url, 'operator', '#/inbox')
    const b = await signIn(await newContext(browser), s.url, 'operator', '#/inbox')
    const cueIn = (p: Page) => p.locator(`[data-cue-id="${stepId}"]`)
    await cueIn(a).waitFor()
    await cueIn(b).waitFor()
    const pollMs = await pollMsOf(b)

    await cueIn(a).getByRole('textbox').fill('gates open, crowd calm')
    const answered = a.waitForResponse((r) => (r.request().postData() ?? '').includes('ResolveCue'))
    await cueIn(a).getByRole('button', { name: 'Resolve' }).click()
    expect((await (await answered).json()).data.resolveCue.applied).toBe(true)
    const t0 = Date.now()
    await cueIn(b).waitFor({ state: 'detached', timeout: pollMs + 100 })
    const tookMs = Date.now() - t0
    expect(tookMs).toBeLessThanOrEqual(pollMs + 100)
    await cueIn(a).waitFor({ state: 'detached', timeout: pollMs + 100 })
    expect((await waitingCues(s)).some((c) => c.id === stepId)).toBe(false)
    await a.context().close()
    await b.context().close()
  })

  it('with the WebSocket blocked, the inbox falls back to polling and still follows the other console', async () => {
    const { stepId } = await parkedCue('north')
    const blocked = async () => {
      const context = await newContext(browser)
      // A proxy that refuses WebSocket upgrades: nothing can be pushed.
      await context.routeWebSocket(/\/graphql$/, (ws) => ws.close())
      return signIn(context, s.url, 'operator', '#/inbox')
    }
    const a = await blocked()
    const b = await blocked()
    const cueIn = (p: Page) => p.locator(`[data-cue-id="${stepId}"]`)
    await cueIn(a).waitFor()
    await cueIn(b).waitFor()
    await b.getByText('Refreshing every few moments.').waitFor()
    const pollMs = await pollMsOf(b)
    const answered = a.waitForResponse((r) => (r.request().postData() ?? '').includes('SkipStep'))
    await cueIn(a).getByRole('textbox').fill('not tonight')
    await cueIn(a).getByRole('button', { name: 'Skip' }).click()
    expect((await (await answered).json()).data.skipStep.applied).toBe(true)
    // One poll interval, plus the time the poll in flight and the next one take on a busy machine.
    await cueIn(b).waitFor({ state: 'detached', timeout: pollMs + 1000 })
    await a.context().close()
    await b.context().close()
  })

  it('answers the oldest cue from the keyboard: a, type a note, Enter', async () => {
    const older = await parkedCue('south')
    const newer = await parkedCue('east')
    const page = await signIn(await newContext(browser), s.url, 'operator', '#/')
    await page.getByRole('heading', { name: 'Board' }).waitFor()
    await page.locator(`[data-testid="inbox-count"]`).waitFor()
    // A slow device (or a busy CI machine) renders the inbox well after the key
    // press: the focus request must wait for the cue, not for a fixed delay.
    const cdp = await page.context().newCDPSession(page)
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: 10 })
    await page.keyboard.press('a')
    await page.locator(`[data-cue-id="${older.stepId}"] input:focus`).waitFor()
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: 1 })
    await page.keyboard.type('from the keyboard')
    await page.keyboard.press('Enter')
    await page.locator(`[data-cue-id="${older.stepId}"]`).waitFor({ state: 'detached' })
    const left = (await waitingCues(s)).map((c) => c.id)
    expect(left).not.toContain(older.stepId)
    expect(left).toContain(newer.stepId)
    const logs = await s.gql<{ run: { logs: { message: string }[] } }>(
      'query ($id: ID!) { run(id: $id) { logs(limit: 50) { message } } }',
      { variables: { id: older.runId } },
    )
    expect(JSON.stringify(logs.body.data)).toContain('from the keyboard')
    await page.context().close()
  })

  it('shows a run started over the API on the board, live', async () => {
    const page = await signIn(await newContext(browser), s.url, 'viewer', '#/')
    await page.getByRole('heading', { name: 'Board' }).waitFor()
    await page.locator('[data-testid="in-progress"], main .panel p.muted').first().waitFor()
    const pollMs = await pollMsOf(page)
    const runId = await startRun(s, definitionId, 'west')
    const t0 = Date.now()
    await page
      .locator(`[data-testid="in-progress"] a[href="#/runs/${runId}"]`)
      .waitFor({ timeout: pollMs + 2000 })
    // Live without a reload: the page was never navigated.
    expect(Date.now() - t0).toBeLessThan(pollMs + 2000)
    await page.context().close()
  })

  it('shows a viewer no control it cannot use; an operator and an admin see theirs', async () => {
    const { runId } = await parkedCue('')
    const pages = [
      ['#/inbox', 'main [data-cue-id]'],
      // Hash routes keep the document, so `main h1` could still be the last page's: the run's own summary.
      [`#/runs/${runId}`, 'main .run-summary'],
      ['#/definitions', 'main .card'],
      [`#/definitions/${definitionId}`, 'main h1'],
      ['#/', 'main h1'],
      ['#/standby', 'main h1'],
    ] as const
    const buttonsOn = async (role: 'viewer' | 'operator' | 'admin') => {
      const page = await signIn(await newContext(browser), s.url, role)
      const seen: Record<string, string[]> = {}
      for (const [hash, ready] of pages) {
        await page.goto(`${s.url}/${hash}`)
        await waitOrExplain(page, ready)
        await page.waitForTimeout(100)
        seen[hash] = (await page
          .locator('main button, main input, main select')
          .evaluateAll((els) =>
            els.map((e) => (e as HTMLElement).textContent?.trim() || (e as HTMLInputElement).type),
          )) as string[]
      }
      await page.context().close()
      return seen
    }
    const viewer = await buttonsOn('viewer')
    for (const [hash, controls] of Object.entries(viewer)) expect(controls, hash).toEqual([])
    const operator = await buttonsOn('operator')
    expect(operator['#/inbox']).toEqual(expect.arrayContaining(['Resolve', 'Skip']))
    expect(operator[`#/runs/${runId}`]).toEqual(expect.arrayContaining(['Pause', 'Cancel run']))
    expect(operator['#/definitions']).toEqual([])
    const admin = await buttonsOn('admin')
    expect(admin['#/definitions']).toEqual(expect.arrayContaining(['Archive']))
    // Its only show is started by hand: there is no schedule to pause.
    expect(admin['#/definitions']).not.toContain('Pause schedule')
  })

  it('pauses and resumes a run from its page', async () => {
    const { runId } = await parkedCue('north')
    const page = await signIn(await newContext(browser), s.url, 'operator', `#/runs/${runId}`)
    await page.getByRole('button', { name: 'Pause' }).click()
    await page.getByRole('button', { name: 'Resume' }).waitFor()
    const paused = await s.gql<{ run: { status: string } }>('query ($id: ID!) { run(id: $id) { status } }', {
      variables: { id: runId },
    })
    expect(paused.body.data?.run.status).toBe('PAUSED')
    await page.getByRole('button', { name: 'Resume' }).click()
    await page.getByRole('button', { name: 'Pause' }).waitFor()
    await page.context().close()
  })
})

/** Replace a GraphiQL (Monaco) editor's text the way a paste does (typing would meet its auto-closing brackets). */
async function pasteInto(page: Page, editorUri: string, text: string): Promise<void> {
  const editor = page.locator(`.monaco-editor[data-uri*="${editorUri}"]`)
  await editor.click()
  await page.keyboard.press('ControlOrMeta+a')
  await page.keyboard.press('Backspace')
  await editor.locator('textarea').evaluate((el, t) => {
    const data = new DataTransfer()
    data.setData('text/plain', t)
    el.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }))
  }, text)
}

describe('GraphiQL at /graphql', () => {
  it('loads from this server alone and runs { health { ok } } with a token in its headers editor', async () => {
    const context = await newContext(browser)
    const page = await context.newPage()
    const outside: string[] = []
    page.on('request', (r) => {
      if (!r.url().startsWith(s.url) && !/^(data|blob):/.test(r.url())) outside.push(r.url())
    })
    await page.goto(`${s.url}/graphql`)
    await page.locator('.monaco-editor[data-uri*="headers"]').waitFor({ timeout: 30_000 })
    await pasteInto(page, 'headers', JSON.stringify({ Authorization: `Bearer ${TOKENS.viewer}` }))
    await pasteInto(page, 'operation', '{ health { ok } }')
    await page.getByRole('button', { name: /Execute query/ }).click()
    const result = page.locator('section[aria-label="Result Window"]')
    await expect
      .poll(async () => ((await result.textContent()) ?? '').replace(/\s+/g, ''), { timeout: 10_000 })
      .toMatch(/"data":\{"health":\{"ok":(true|false)\}\}/)
    expect(outside).toEqual([])
    await context.close()
  })
})
