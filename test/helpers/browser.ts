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
  await page.goto(`${url}/${hash}`)
  await page.getByLabel('Access token').fill(TOKENS[role])
  await page.getByRole('button', { name: 'Sign in', exact: true }).click()
  await page.getByTestId('role').waitFor()
  return page
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
