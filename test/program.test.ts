import { describe, expect, it } from 'vitest'
import { AppError } from '../src/errors.ts'
import {
  expandProgram,
  type ProgramProblem,
  programProblems,
  STEP_DEFAULTS,
  validateProgram,
} from '../src/runner/program.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'

const registry = createDefaultRegistry()

/** The example program of docs/contract.md. */
const EXAMPLE_PROGRAM = {
  phases: [
    {
      name: 'announce',
      steps: [
        {
          kind: 'core.webhook',
          params: {
            url: 'https://hooks.example.com/x',
            body: { content: '{{definition.title}} starts soon' },
          },
        },
        { kind: 'core.wait', params: { until: '+0s' } },
      ],
    },
    { name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Open the gates' } }] },
    { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
  ],
}

function invalid(json: unknown): AppError {
  try {
    validateProgram(json, registry)
  } catch (err) {
    expect(err).toBeInstanceOf(AppError)
    return err as AppError
  }
  throw new Error('expected validateProgram to throw')
}

describe('validateProgram', () => {
  it('accepts the example program and answers it in canonical form', () => {
    expect(validateProgram(EXAMPLE_PROGRAM, registry)).toEqual(EXAMPLE_PROGRAM)
    expect(validateProgram(JSON.stringify(EXAMPLE_PROGRAM), registry)).toEqual(EXAMPLE_PROGRAM)
  })

  it('lists every problem with its JSON path, in the message and in details', () => {
    const err = invalid({
      phases: [
        { name: 'a', steps: [{ kind: 'core.log', params: { message: 'hi' } }] },
        {
          name: 'b',
          steps: [
            { kind: 'core.tweet' },
            { kind: 'core.webhook', params: { url: 42, body: '{{nope}}' } },
            {
              kind: 'core.wait',
              params: { seconds: 5 },
              retry: { attempts: 0, backoffSeconds: 9999, jitter: 1 },
            },
            {
              kind: 'core.log',
              params: { message: 'x' },
              timeoutSeconds: 0,
              onError: 'ignore',
              name: 'extra',
            },
          ],
        },
      ],
    })
    expect(err.code).toBe('BAD_USER_INPUT')
    const problems = err.details?.problems as ProgramProblem[]
    expect(problems).toEqual([
      {
        path: 'phases[1].steps[0].kind',
        message: 'unknown step kind "core.tweet" (known: core.cue, core.log, core.wait, core.webhook)',
      },
      { path: 'phases[1].steps[1].params.url', message: 'must be a string, not a number' },
      {
        path: 'phases[1].steps[1].params.body',
        message: expect.stringMatching(/^unknown placeholder "\{\{nope\}\}" \(known: /),
      },
      { path: 'phases[1].steps[2].retry.jitter', message: 'unknown key (allowed: attempts, backoffSeconds)' },
      { path: 'phases[1].steps[2].retry.attempts', message: 'must be from 1 to 20; got 0' },
      { path: 'phases[1].steps[2].retry.backoffSeconds', message: 'must be from 0 to 3600; got 9999' },
      {
        path: 'phases[1].steps[3].name',
        message: 'unknown key (allowed: kind, params, retry, timeoutSeconds, onError)',
      },
      { path: 'phases[1].steps[3].timeoutSeconds', message: 'must be from 1 to 3600; got 0' },
      { path: 'phases[1].steps[3].onError', message: 'must be "fail" or "degrade"; got "ignore"' },
    ])
    expect(err.message).toBe(`Invalid program: ${problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`)
    expect(err.message).toContain(
      'Invalid program: phases[1].steps[0].kind: unknown step kind "core.tweet" (known: core.cue, core.log, core.wait, core.webhook); phases[1].steps[1].params.url: must be a string, not a number',
    )
  })

  it('checks the program shape', () => {
    expect(invalid({ phases: [] }).message).toBe('Invalid program: phases: must not be empty')
    expect(invalid(null).message).toBe(
      'Invalid program: program: must be an object like {"phases": [...]}, not null',
    )
    expect(invalid('{').message).toBe('Invalid program: program: is a string that is not valid JSON')
    expect(invalid({}).message).toBe('Invalid program: phases: is required')
    expect(invalid({ phases: {}, version: 2 }).message).toBe(
      'Invalid program: version: unknown key (allowed: phases); phases: must be an array, not an object',
    )
  })

  it('checks phases: names, steps, ending order, unknown keys', () => {
    const err = invalid({
      phases: [
        { name: '', steps: [{ kind: 'core.log', params: { message: 'a' } }] },
        { name: 'x'.repeat(101), steps: [] },
        { name: 'main', steps: 'nope' },
        { name: 'main', ending: true, steps: [{ kind: 'core.log', params: { message: 'a' } }] },
        { name: 'after', steps: [{ kind: 'core.log', params: { message: 'a' } }], when: 'later' },
        { name: 'wrap', ending: 'yes', steps: [{ kind: 'core.log', params: { message: 'a' } }] },
        5,
      ],
    })
    expect(err.details?.problems).toEqual([
      { path: 'phases[0].name', message: 'must not be empty' },
      { path: 'phases[1].name', message: 'must be at most 100 characters; got 101' },
      { path: 'phases[1].steps', message: 'must not be empty' },
      { path: 'phases[2].steps', message: 'must be an array, not a string' },
      { path: 'phases[3].name', message: 'duplicates the name of phases[2] ("main")' },
      { path: 'phases[4].when', message: 'unknown key (allowed: name, ending, steps)' },
      {
        path: 'phases[4]',
        message:
          'must be an ending phase: it follows the ending phase phases[3] ("main"), and only ending phases may follow one',
      },
      { path: 'phases[5].ending', message: 'must be true or false, not a string' },
      { path: 'phases[6]', message: 'must be an object with "name" and "steps", not a number' },
    ])
  })

  it('validates params through the kind, with paths under params', () => {
    expect(
      programProblems(
        {
          phases: [
            {
              name: 'p',
              steps: [
                { kind: 'core.webhook', params: { url: 'https://a.example/', headers: { Host: 'x' } } },
                { kind: 'core.wait' },
                { kind: 'core.cue', params: [] },
              ],
            },
          ],
        },
        registry,
      ),
    ).toEqual([
      {
        path: 'phases[0].steps[0].params.headers.Host',
        message: 'is managed by the HTTP client and may not be set',
      },
      { path: 'phases[0].steps[1].params', message: 'give exactly one of "seconds" or "until"' },
      { path: 'phases[0].steps[2].params', message: 'must be an object, not an array' },
    ])
  })

  it('limits a program to 1000 steps', () => {
    const step = { kind: 'core.log', params: { message: 'x' } }
    const big = {
      phases: [
        { name: 'a', steps: Array(600).fill(step) },
        { name: 'b', steps: Array(401).fill(step) },
      ],
    }
    expect(invalid(big).message).toBe(
      'Invalid program: phases: has 1001 steps in total; at most 1000 are allowed',
    )
    big.phases[1]!.steps.pop()
    expect(() => validateProgram(big, registry)).not.toThrow()
  })

  it('caps the message but keeps every problem in details', () => {
    const bad = { phases: [{ name: 'a', steps: Array.from({ length: 40 }, () => ({ kind: 'x.y' })) }] }
    const err = invalid(bad)
    expect(err.details?.problems).toHaveLength(40)
    expect(err.message).toMatch(/; … and 15 more$/)
  })
})

describe('expandProgram', () => {
  it('numbers steps globally and applies the per-step defaults', () => {
    const program = validateProgram(
      {
        phases: [
          EXAMPLE_PROGRAM.phases[0],
          {
            name: 'main',
            steps: [
              {
                kind: 'core.cue',
                params: { prompt: 'Go' },
                retry: { attempts: 2, backoffSeconds: 0.5 },
                timeoutSeconds: 10,
                onError: 'degrade',
              },
            ],
          },
          EXAMPLE_PROGRAM.phases[2],
        ],
      },
      registry,
    )
    const specs = expandProgram(program)
    expect(specs.map((s) => [s.seq, s.phaseIndex, s.phase, s.ending, s.kind])).toEqual([
      [0, 0, 'announce', false, 'core.webhook'],
      [1, 0, 'announce', false, 'core.wait'],
      [2, 1, 'main', false, 'core.cue'],
      [3, 2, 'wrap-up', true, 'core.log'],
    ])
    expect(specs[0]).toMatchObject({ maxAttempts: 5, backoffMs: 1000, timeoutMs: 30_000, onError: 'fail' })
    expect(specs[2]).toMatchObject({ maxAttempts: 2, backoffMs: 500, timeoutMs: 10_000, onError: 'degrade' })
    expect(specs[1]!.params).toEqual({ until: '+0s' })
    expect(STEP_DEFAULTS).toEqual({ attempts: 5, backoffSeconds: 1, timeoutSeconds: 30, onError: 'fail' })
  })

  it('gives a step without params an empty object', () => {
    const specs = expandProgram({ phases: [{ name: 'a', steps: [{ kind: 'acme.noop' }] }] })
    expect(specs[0]!.params).toEqual({})
  })
})
