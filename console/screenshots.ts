/**
 * `npm run console:screenshots`: every console page at 1280×800 (and the board
 * on a phone and in dark mode) into docs/console/, from a real server with a
 * throwaway database and Debian's chromium, the same way the browser suites run.
 */
import { mkdir } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { DESKTOP, launchBrowser, newContext, PHONE, signIn } from '../test/helpers/browser.ts'
import { buildScene, createDefinition, must, startRun, waitingCues } from '../test/helpers/consoleScene.ts'
import { startReceiver } from '../test/helpers/runnerHarness.ts'
import { eventually, startTestServer } from '../test/helpers/server.ts'

const OUT = fileURLToPath(new URL('../docs/console/', import.meta.url))

async function main(): Promise<void> {
  await mkdir(OUT, { recursive: true })
  // A receiver that is down, for a webhook in retry backoff (the run page's Retry now).
  const receiver = await startReceiver()
  receiver.route('/hooks/', () => ({ status: 503, body: 'lights vendor unreachable' }))
  const server = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } })
  const browser = await launchBrowser()
  try {
    const scene = await buildScene(server)
    // A cue whose run is paused (the inbox marks it), and a webhook waiting for its next attempt.
    const late = await createDefinition(server, {
      slug: 'late-show',
      title: 'Late show',
      program: {
        phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Start the encore?' } }] }],
      },
    })
    const lateRun = await startRun(server, late, 'main-stage')
    const lights = await createDefinition(server, {
      slug: 'lights',
      title: 'Lights cue-to-cue',
      timezone: 'Europe/London',
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.log', params: { message: 'lights: warming up' } },
              {
                kind: 'core.webhook',
                params: { url: `${receiver.url}/hooks/lights` },
                retry: { attempts: 5, backoffSeconds: 600 },
              },
              { kind: 'core.log', params: { message: 'lights: on' } },
            ],
          },
        ],
      },
    })
    const lightsRun = await startRun(server, lights)
    await eventually(async () => (await waitingCues(server)).length >= 3)
    await must(server, 'mutation ($id: ID!) { pauseRun(id: $id) { applied } }', { id: lateRun })
    await eventually(async () => receiver.calls.length >= 1)
    const shots: [string, string][] = [
      ['board', '#/'],
      ['inbox', '#/inbox'],
      ['standby', '#/standby'],
      ['run', `#/runs/${scene.runs[0]}`],
      ['run-retry', `#/runs/${lightsRun}`],
      ['runs', '#/runs'],
      ['definitions', '#/definitions'],
      ['definition', `#/definitions/${scene.show}`],
    ]
    const context = await newContext(browser, { viewport: DESKTOP })
    const signin = await context.newPage()
    await signin.goto(`${server.url}/`)
    await signin.getByLabel('Access token').waitFor()
    await signin.screenshot({ path: `${OUT}signin.png` })
    await signin.close()
    const page = await signIn(context, server.url, 'operator')
    for (const [name, hash] of shots) {
      await page.goto(`${server.url}/${hash}`)
      await page.locator('main h1').first().waitFor()
      await page.waitForLoadState('networkidle').catch(() => {})
      await page.waitForTimeout(300)
      await page.screenshot({ path: `${OUT}${name}.png` })
      console.log(`docs/console/${name}.png`)
    }
    // Skip held for its Undo: the toast with its countdown.
    await page.goto(`${server.url}/#/runs/${lightsRun}`)
    await page.getByRole('button', { name: 'Skip step' }).click()
    await page.getByLabel('Reason').fill('vendor down tonight')
    await page.getByRole('button', { name: 'Skip this step' }).click()
    await page.getByTestId('undo-toast').waitFor()
    await page.screenshot({ path: `${OUT}run-undo.png` })
    await page.getByRole('button', { name: 'Undo' }).click()
    console.log('docs/console/run-undo.png')
    for (const [name, opts] of [
      ['board-phone', { viewport: PHONE }],
      ['board-dark', { viewport: DESKTOP, colorScheme: 'dark' as const }],
      ['inbox-dark', { viewport: DESKTOP, colorScheme: 'dark' as const }],
    ] as const) {
      const ctx = await newContext(browser, opts)
      const p = await signIn(ctx, server.url, 'operator', name.startsWith('inbox') ? '#/inbox' : '#/')
      await p.locator('main h1').first().waitFor()
      await p.waitForTimeout(500)
      await p.screenshot({ path: `${OUT}${name}.png`, fullPage: name === 'board-phone' })
      console.log(`docs/console/${name}.png`)
      await ctx.close()
    }
  } finally {
    await browser.close()
    await server.close()
    await receiver.close()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
