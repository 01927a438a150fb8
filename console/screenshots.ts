/**
 * `npm run console:screenshots`: every console page at 1280×800 (and the board
 * on a phone and in dark mode) into docs/console/, from a real server with a
 * throwaway database and Debian's chromium, the same way the browser suites run.
 */
import { mkdir } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { DESKTOP, launchBrowser, newContext, PHONE, signIn } from '../test/helpers/browser.ts'
import { buildScene, waitingCues } from '../test/helpers/consoleScene.ts'
import { eventually, startTestServer } from '../test/helpers/server.ts'

const OUT = fileURLToPath(new URL('../docs/console/', import.meta.url))

async function main(): Promise<void> {
  await mkdir(OUT, { recursive: true })
  const server = await startTestServer({ runner: true })
  const browser = await launchBrowser()
  try {
    const scene = await buildScene(server)
    await eventually(async () => (await waitingCues(server)).length >= 2)
    const shots: [string, string][] = [
      ['board', '#/'],
      ['inbox', '#/inbox'],
      ['standby', '#/standby'],
      ['run', `#/runs/${scene.runs[0]}`],
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
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
