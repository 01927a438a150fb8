/**
 * The console's first load: from navigating to `/` in Debian's chromium to a
 * live board listing 200 runs in progress, signed in (the token already in the
 * tab's sessionStorage, as after a sign-in), on a real server with its runner.
 * Target: ≤ 1 s, and the page's JavaScript ≤ 150 KB gzipped.
 *
 * "cold" is the very first load after the server started (it includes bundling
 * the console, once per process); the figure is the median of the warm loads
 * that follow, each in a fresh browser context (empty cache, new tab).
 *
 * Alone: `npx tsx bench/consoleLoad.ts`.
 */
import { loadavg } from 'node:os'
import { consoleBundle } from '../console/build.ts'
import { launchBrowser, newContext } from '../test/helpers/browser.ts'
import { createDefinition, must } from '../test/helpers/consoleScene.ts'
import { eventually, startTestServer, TOKENS } from '../test/helpers/server.ts'
import { type BenchResult, median, printResults, runMain, saveResult } from './lib.ts'

const RUNS = 200
const WARM_LOADS = 7
const TARGET_MS = 1000
const TARGET_JS_GZIP_BYTES = 150 * 1024

const PARKED_PROGRAM = {
  phases: [{ name: 'show', steps: [{ kind: 'core.cue', params: { prompt: 'Go on {{run.scope}}?' } }] }],
}

async function run(): Promise<Record<string, BenchResult>> {
  const server = await startTestServer({ runner: true })
  const browser = await launchBrowser()
  try {
    const scopes = Array.from({ length: RUNS }, (_, i) => `stage-${i + 1}`)
    const definitionId = await createDefinition(server, {
      slug: 'bench-board',
      title: 'Bench board',
      scopes,
      program: PARKED_PROGRAM,
    })
    for (const scope of scopes) {
      await must(server, 'mutation ($d: ID!, $s: String) { startRun(definitionId: $d, scope: $s) { id } }', {
        d: definitionId,
        s: scope,
      })
    }
    await eventually(async () => {
      const d = await must<{ health: { waitingSteps: number } }>(server, '{ health { waitingSteps } }')
      return d.health.waitingSteps >= RUNS
    }, 120_000)

    const loadOnce = async (): Promise<{ ms: number; jsBytes: number }> => {
      const context = await newContext(browser)
      // As after a sign-in in this tab: the token and the role it was found to have.
      await context.addInitScript((token) => {
        sessionStorage.setItem('showrunner.token', token)
        sessionStorage.setItem('showrunner.viewer', JSON.stringify({ role: 'VIEWER', actor: 'viewer' }))
      }, TOKENS.viewer)
      const page = await context.newPage()
      let jsBytes = 0
      page.on('response', async (res) => {
        if (res.url().includes('/console/app.js')) {
          const sizes = await res.request().sizes()
          jsBytes += sizes.responseBodySize
        }
      })
      const started = performance.now()
      await page.goto(`${server.url}/`)
      await page.waitForFunction(
        (n) => document.querySelectorAll('[data-testid="in-progress"] > li').length >= n,
        RUNS,
        { timeout: 30_000, polling: 'raf' },
      )
      const ms = performance.now() - started
      if (process.env.CONSOLE_LOAD_TIMINGS) {
        const entries = await page.evaluate(() =>
          performance.getEntriesByType('resource').map((e) => {
            const r = e as PerformanceResourceTiming
            return `${Math.round(r.startTime)}+${Math.round(r.duration)} ${r.name.replace(location.origin, '')}`
          }),
        )
        console.log(Math.round(ms), entries.join(' | '))
      }
      await context.close()
      return { ms, jsBytes }
    }

    const cold = await loadOnce()
    const warm: number[] = []
    let jsTransferred = cold.jsBytes
    for (let i = 0; i < WARM_LOADS; i++) {
      const r = await loadOnce()
      warm.push(r.ms)
      jsTransferred = r.jsBytes
    }
    const bundle = await consoleBundle()
    const loadMs = median(warm)
    const jsGzip = bundle.js.gzipped.length
    const results: Record<string, BenchResult> = {
      consoleLoad: {
        value: Math.round(loadMs),
        unit: 'ms to a live board of 200 runs (median first load, fresh context)',
        baseline: null,
        ratio: null,
        target: `≤ ${TARGET_MS} ms and JavaScript ≤ 150 KB gzipped`,
        met: loadMs <= TARGET_MS && jsGzip <= TARGET_JS_GZIP_BYTES,
        detail: {
          runs: RUNS,
          // The browser, the server and the database share this machine's cores.
          loadAverage1m: Math.round((loadavg()[0] ?? 0) * 10) / 10,
          warmLoadsMs: warm.map((v) => Math.round(v)),
          coldFirstLoadMsIncludingBundling: Math.round(cold.ms),
          jsGzipBytes: jsGzip,
          jsBytes: bundle.js.body.length,
          jsTransferredBytes: jsTransferred,
          cssGzipBytes: bundle.css.gzipped.length,
        },
      },
    }
    for (const [name, result] of Object.entries(results)) await saveResult(name, result)
    return results
  } finally {
    await browser.close()
    await server.close()
  }
}

runMain(import.meta.url, async () => printResults(await run()))
