import { describe, expect, it } from 'vitest'
import { joinPath, renderTemplate, type TemplateVars, templateProblems } from '../src/runner/template.ts'

const vars: TemplateVars = {
  run: { scope: 'eu-west', scheduledFor: new Date('2025-06-01T18:00:00.000Z'), id: 42 },
  params: { guest: 'Ada', count: 3, flags: { loud: true }, nothing: null },
  definition: { title: 'Raid Night', slug: 'raid-night' },
}

describe('renderTemplate', () => {
  it('renders every placeholder in nested strings, leaving keys and non-strings alone', () => {
    const input = {
      content: '{{definition.title}} starts at {{run.scheduledFor}} in {{ run.scope }}',
      '{{run.scope}}': [
        '{{params.guest}} x{{params.count}}',
        7,
        true,
        null,
        { deep: '{{run.id}}/{{definition.slug}}' },
      ],
    }
    expect(renderTemplate(input, vars)).toEqual({
      content: 'Raid Night starts at 2025-06-01T18:00:00.000Z in eu-west',
      '{{run.scope}}': ['Ada x3', 7, true, null, { deep: '42/raid-night' }],
    })
    expect(input.content).toContain('{{') // the input is not mutated
  })

  it('renders objects as JSON and missing or unknown names as empty text', () => {
    expect(renderTemplate('{{params.flags}}|{{params.nothing}}|{{params.absent}}|{{bogus.name}}', vars)).toBe(
      '{"loud":true}|||',
    )
    expect(renderTemplate('{{params.guest}}', { ...vars, params: null })).toBe('')
  })

  it('renders a concurrency-key template', () => {
    expect(renderTemplate('world:{{run.scope}}', vars)).toBe('world:eu-west')
  })

  it('leaves text without complete placeholders alone', () => {
    expect(renderTemplate('a {{ b', vars)).toBe('a {{ b')
    expect(renderTemplate('{}', vars)).toBe('{}')
  })
})

describe('templateProblems', () => {
  it('reports unknown placeholders with their paths', () => {
    const problems = templateProblems(
      { a: '{{run.scope}} {{run.nope}}', list: ['ok', '{{ params.x }}', '{{title}}'], 'odd key': '{{x.y}}' },
      'phases[0].steps[1].params',
    )
    expect(problems.map((p) => p.path)).toEqual([
      'phases[0].steps[1].params.a',
      'phases[0].steps[1].params.list[2]',
      'phases[0].steps[1].params["odd key"]',
    ])
    expect(problems[0]!.message).toMatch(/unknown placeholder "\{\{run\.nope\}\}" \(known: run\.scope, /)
  })

  it('accepts every known name', () => {
    expect(
      templateProblems(
        '{{run.scope}}{{run.scheduledFor}}{{run.id}}{{params.a_b-c}}{{definition.title}}{{definition.slug}}',
      ),
    ).toEqual([])
  })

  it('joins paths', () => {
    expect(joinPath('', 'a')).toBe('a')
    expect(joinPath('a', 0)).toBe('a[0]')
    expect(joinPath('a', 'X-Header')).toBe('a["X-Header"]')
  })
})
