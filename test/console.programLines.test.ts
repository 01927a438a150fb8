/**
 * The program editor puts each problem the server finds at its line, in
 * chromium: "line N" beside the path, and pressing it selects that line of
 * the text (the cursor at the key the problem names, or at its nearest
 * written ancestor for a missing field). It offers, where the cursor is, the
 * fields the committed JSON Schema allows there and are not yet written;
 * pressing one adds it and the text stays JSON. Also the path locator and
 * the completion alone.
 */
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { jsonPlaces, placeOf } from '../console/app/jsonPaths.ts'
import { addField, fieldsAt } from '../console/app/programFields.ts'
import definitionSchema from '../schema/definition.schema.json' with { type: 'json' }
import { launchBrowser, newContext, seriousViolations, signIn } from './helpers/browser.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let browser: Browser
beforeAll(async () => {
  ;[s, browser] = await Promise.all([startTestServer(), launchBrowser()])
})
afterAll(async () => {
  await browser?.close()
  await s?.close()
})

describe('jsonPlaces', () => {
  it('finds each path where it is written, by line', () => {
    const text = JSON.stringify(
      {
        phases: [
          { name: 'a "quoted" one', steps: [{ kind: 'core.log', params: { message: 'x' } }] },
          { name: 'b', steps: [{ kind: 'core.wait', params: {} }, { kind: 'core.nope' }] },
        ],
      },
      null,
      2,
    )
    const places = jsonPlaces(text)
    const lineOf = (needle: string, nth = 0) => {
      let at = -1
      for (let k = 0; k <= nth; k++) at = text.indexOf(needle, at + 1)
      return text.slice(0, at).split('\n').length
    }
    expect(places.get('phases[1].steps[1].kind')?.line).toBe(lineOf('"core.nope"'))
    expect(places.get('phases[0].steps[0].params.message')?.line).toBe(lineOf('"message"'))
    expect(places.get('phases[1].name')?.line).toBe(lineOf('"name"', 1))
    // A missing field is shown at its nearest written ancestor.
    expect(placeOf(places, 'phases[1].steps[0].params.seconds')?.line).toBe(lineOf('"params": {}'))
    expect(placeOf(places, 'program')).toBeNull()
  })
})

describe('fieldsAt / addField', () => {
  const text = '{ "phases": [ { "name": "main", "steps": [ { "kind": "core.log" } ] } ] }'
  it('offers the fields of the object under the cursor that the schema allows, less those written', () => {
    const inStep = fieldsAt(text, text.indexOf('"kind"'))
    expect(inStep?.path).toBe('phases[0].steps[0]')
    const stepKeys = Object.keys(
      definitionSchema.properties.program.properties.phases.items.properties.steps.items.properties,
    )
    expect(inStep?.fields.map((f) => f.key)).toEqual(stepKeys.filter((k) => k !== 'kind'))
    const inPhase = fieldsAt(text, text.indexOf('"name"'))
    expect(inPhase).toMatchObject({ path: 'phases[0]', fields: [{ key: 'ending', snippet: 'true' }] })
    expect(fieldsAt(text, 0)).toBeNull()
    expect(fieldsAt('{ "phases": [', 3)).toBeNull()
  })
  it('adds a field so that the text stays JSON, with the cursor at its value', () => {
    const at = text.indexOf('"kind"')
    const hints = fieldsAt(text, at)
    for (const f of hints?.fields ?? []) {
      const added = addField(text, at, f)
      expect(() => JSON.parse(added.text), f.key).not.toThrow()
    }
    const onError = hints?.fields.find((f) => f.key === 'onError')
    const added = addField(text, at, onError as NonNullable<typeof onError>)
    expect(added.text).toContain('{ "onError": "fail", "kind": "core.log" }')
  })
})

describe('the program editor', () => {
  it('shows each problem at its line; pressing it selects that line', async () => {
    const page = await signIn(await newContext(browser), s.url, 'admin', '#/definitions/new')
    await page.getByRole('heading', { name: 'New show', level: 1 }).waitFor()
    const text = JSON.stringify(
      {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.log', params: { message: 'hello' } },
              { kind: 'core.log', params: { message: 'again' } },
              { kind: 'core.nope', params: {} },
            ],
          },
        ],
      },
      null,
      2,
    )
    await page.getByLabel('Program (JSON)').fill(text)
    const problems = page.getByTestId('program-problems')
    await problems.getByText('phases[0].steps[2].kind').waitFor()
    const wanted = text.slice(0, text.indexOf('"kind": "core.nope"')).split('\n').length
    const button = problems.getByRole('button', { name: `Go to line ${wanted} (phases[0].steps[2].kind)` })
    expect(await button.textContent()).toBe(`line ${wanted}`)
    expect(await seriousViolations(page)).toEqual([])
    await button.click()
    const selected = await page.getByLabel('Program (JSON)').evaluate((el) => {
      const area = el as HTMLTextAreaElement
      return {
        focused: document.activeElement === area,
        text: area.value.slice(area.selectionStart, area.selectionEnd),
      }
    })
    expect(selected).toEqual({ focused: true, text: '"kind": "core.nope",' })

    // Completion at the cursor: in the third step, the step fields not yet written.
    const hints = page.getByTestId('field-hints')
    await hints.waitFor()
    expect(await hints.textContent()).toMatch(
      /^Fields for phases\[0\]\.steps\[2\]:\s*retry\s*timeoutSeconds\s*onError$/,
    )
    expect(await seriousViolations(page)).toEqual([])
    await hints.getByRole('button', { name: /^Add timeoutSeconds/ }).click()
    const after = await page.getByLabel('Program (JSON)').inputValue()
    const parsed = JSON.parse(after) as { phases: { steps: Record<string, unknown>[] }[] }
    expect(parsed.phases[0]?.steps[2]).toEqual({ timeoutSeconds: 1, kind: 'core.nope', params: {} })
    expect(await hints.textContent()).not.toContain('timeoutSeconds')
    await page.context().close()
  })
})
