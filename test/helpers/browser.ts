/**
 * Debian's chromium driven by playwright-core, for the console suites and the
 * screenshot script. Nothing here downloads a browser: when /usr/bin/chromium
 * is missing, the suites say how to install it.
 */
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core'
import { TOKENS, type TokenName } from './server.ts'

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

export function chromiumProblem(): string | null {
  return existsSync(CHROMIUM)
    ? null
    : `${CHROMIUM} is missing: install it with "apt-get install -y chromium" (or set CHROMIUM_PATH).`
}

export function launchBrowser(): Promise<Browser> {
  const problem = chromiumProblem()
  if (problem) throw new Error(problem)
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  })
}

export const DESKTOP = { width: 1280, height: 800 } as const
export const PHONE = { width: 390, height: 844 } as const

export async function newContext(
  browser: Browser,
  opts: { viewport?: { width: number; height: number }; colorScheme?: 'light' | 'dark' } = {},
): Promise<BrowserContext> {
  return browser.newContext({
    viewport: opts.viewport ?? DESKTOP,
    colorScheme: opts.colorScheme ?? 'light',
    timezoneId: 'Europe/Paris',
    locale: 'en-GB',
    // The console may only talk to its own server: fail loudly on anything else.
    serviceWorkers: 'block',
  })
}

/** Open the console at `url` (a server base URL) and sign in as `role`. */
export async function signIn(
  context: BrowserContext,
  url: string,
  role: TokenName,
  hash = '#/',
): Promise<Page> {
  const page = await context.newPage()
  const outside: string[] = []
  page.on('request', (req) => {
    if (
      !req.url().startsWith(url) &&
      !req.url().startsWith(url.replace(/^http/, 'ws')) &&
      !req.url().startsWith('data:')
    )
      outside.push(req.url())
  })
  ;(page as Page & { outsideRequests?: string[] }).outsideRequests = outside
  recordTrouble(page)
  await page.goto(`${url}/${hash}`)
  await page.getByLabel('Access token').fill(TOKENS[role])
  await page.getByRole('button', { name: 'Sign in', exact: true }).click()
  await page.getByTestId('role').waitFor()
  return page
}

/** What went wrong in a page so far: its uncaught errors, console errors, and answers of 400 or more. */
const troubles = new WeakMap<Page, string[]>()

/** Keep the last 50 troubles of `page`, for {@link waitOrExplain}. */
function recordTrouble(page: Page): void {
  const list: string[] = []
  troubles.set(page, list)
  const add = (line: string) => {
    list.push(`${new Date().toISOString().slice(11, 23)} ${line}`)
    if (list.length > 50) list.shift()
  }
  page.on('pageerror', (err) => add(`pageerror: ${err.message}`))
  page.on('console', (msg) => {
    if (msg.type() === 'error' || msg.type() === 'warning') add(`console.${msg.type()}: ${msg.text()}`)
  })
  page.on('response', (res) => {
    if (res.status() >= 400) add(`${res.status()} ${res.request().method()} ${res.url()}`)
  })
  page.on('requestfailed', (req) => add(`failed ${req.method()} ${req.url()}: ${req.failure()?.errorText}`))
  page.on('websocket', (ws) => {
    add(`websocket opened ${ws.url()}`)
    ws.on('close', () => add('websocket closed'))
  })
}

/**
 * Wait for `selector` in `page`; when it does not come, fail with what the
 * page showed instead (its main text) and what went wrong in it, so a
 * timeout on a loaded machine says why rather than only that.
 */
export async function waitOrExplain(page: Page, selector: string, timeout = 30_000): Promise<void> {
  try {
    await page.locator(selector).first().waitFor({ timeout })
  } catch (err) {
    const main = await page
      .locator('main')
      .first()
      .textContent({ timeout: 2000 })
      .catch((e: Error) => `(no main: ${e.message.split('\n')[0]})`)
    const seen = troubles.get(page) ?? []
    throw new Error(
      `${(err as Error).message.split('\n')[0]}\nat ${page.url()}, main read:\n${(main ?? '').slice(0, 2000)}\n` +
        `troubles:\n${seen.join('\n') || '(none)'}`,
    )
  }
}

const require = createRequire(import.meta.url)
let axeSource: string | null = null

export interface AxeViolation {
  id: string
  impact: string | null
  help: string
  nodes: { target: string[]; html: string }[]
}

/** Run axe-core (from node_modules, evaluated in the page) and answer the serious and critical violations. */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  axeSource ??= readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8')
  await page.evaluate(axeSource)
  const violations = await page.evaluate(async () => {
    // biome-ignore lint/suspicious/noExplicitAny: axe is a global the evaluated source defines
    const axe = (globalThis as any).axe
    const result = await axe.run(document, { resultTypes: ['violations'] })
    return result.violations as AxeViolation[]
  })
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({ ...v, nodes: v.nodes.slice(0, 3).map((n) => ({ target: n.target, html: n.html })) }))
}
