import { describe, expect, it } from 'vitest'
import { promptOf as consolePromptOf } from '../console/app/format.ts'
import { cueStep } from '../src/runner/steps/cue.ts'
import { logStep } from '../src/runner/steps/log.ts'
import { cuePrompt, promptOf, parseOffset as sharedParseOffset } from '../src/runner/steps/paramText.ts'
import { createDefaultRegistry, StepRegistry } from '../src/runner/steps/registry.ts'
import { StepFailure, type StepKind } from '../src/runner/steps/types.ts'
import { parseOffset, waitStep } from '../src/runner/steps/wait.ts'
import { webhookStep } from '../src/runner/steps/webhook.ts'
import { makeStepContext } from './helpers/stepContext.ts'

const T0 = new Date('2025-06-01T18:00:00Z')
const at = (ms: number) => new Date(T0.getTime() + ms)

describe('StepRegistry', () => {
  it('holds the four built-ins', () => {
    const r = createDefaultRegistry()
    expect(r.kinds()).toEqual(['core.cue', 'core.log', 'core.wait', 'core.webhook'])
    expect(r.get('core.webhook')?.sideEffects).toBe(true)
    expect(r.get('core.log')?.sideEffects).toBe(false)
    expect(r.get('core.tweet')).toBeUndefined()
  })

  it('registers custom kinds and refuses duplicates and bad names', () => {
    const r = createDefaultRegistry()
    const lights: StepKind = {
      kind: 'acme.lights',
      sideEffects: true,
      validate: () => [],
      execute: async () => ({ type: 'completed' }),
    }
    r.register(lights)
    expect(r.get('acme.lights')).toBe(lights)
    expect(() => r.register(lights)).toThrow(/already registered/)
    expect(() => r.register({ ...lights, kind: 'Lights' })).toThrow(/namespace\.name/)
    expect(() => new StepRegistry().register({ ...lights, sideEffects: undefined as never })).toThrow(
      /sideEffects/,
    )
  })
})

describe('core.log', () => {
  it('validates', () => {
    expect(logStep.validate({ message: 'hi' })).toEqual([])
    expect(logStep.validate({ message: 'hi', level: 'warn' })).toEqual([])
    expect(logStep.validate({})).toEqual([{ path: 'message', message: 'is required (string)' }])
    expect(logStep.validate({ message: 5, level: 'loud', extra: 1 })).toEqual([
      { path: 'message', message: 'must be a string, not a number' },
      { path: 'level', message: 'must be one of debug, info, warn, error' },
      { path: 'extra', message: 'unknown key (allowed: message, level)' },
    ])
  })

  it('writes the line at its level and completes', async () => {
    const ctx = makeStepContext({ message: 'doors open', level: 'warn' as const })
    expect(await logStep.execute(ctx)).toEqual({ type: 'completed' })
    expect(ctx.lines).toEqual([{ level: 'warn', message: 'doors open' }])
    const ctx2 = makeStepContext({ message: 'plain' })
    await logStep.execute(ctx2)
    expect(ctx2.lines[0]!.level).toBe('info')
  })
})

describe('core.wait', () => {
  it('validates exactly one of seconds / until', () => {
    expect(waitStep.validate({ seconds: 0 })).toEqual([])
    expect(waitStep.validate({ until: '+15m' })).toEqual([])
    expect(waitStep.validate({ until: '2h' })).toEqual([])
    expect(waitStep.validate({})).toEqual([{ path: '', message: 'give exactly one of "seconds" or "until"' }])
    expect(waitStep.validate({ seconds: 1, until: '+1s' })[0]!.message).toMatch(/exactly one/)
    expect(waitStep.validate({ seconds: -1 })).toEqual([{ path: 'seconds', message: 'must be ≥ 0' }])
    expect(waitStep.validate({ seconds: 31 * 86400 })[0]!.message).toMatch(/30 days/)
    expect(waitStep.validate({ until: 'soon' })[0]).toMatchObject({
      path: 'until',
      message: expect.stringMatching(/"\+15m"/),
    })
    expect(waitStep.validate({ until: '-5m' })[0]!.message).toMatch(/must not be negative/)
    expect(waitStep.validate({ until: '+31d' })[0]!.message).toMatch(/30 days/)
  })

  it('parses offsets', () => {
    expect([
      parseOffset('+0s'),
      parseOffset('+90s'),
      parseOffset('15m'),
      parseOffset('+2h'),
      parseOffset('+1d'),
    ]).toEqual([0, 90, 900, 7200, 86400])
    expect(parseOffset('+1w')).toBeNull()
  })

  it('reads offsets and prompts the one way the console reads them too', () => {
    expect(parseOffset).toBe(sharedParseOffset)
    expect(consolePromptOf).toBe(promptOf)
    expect([promptOf({ prompt: 'Open the gates' }), promptOf({ prompt: 3 }), promptOf(null)]).toEqual([
      'Open the gates',
      '(no prompt)',
      '(no prompt)',
    ])
    expect([cuePrompt({ prompt: 'Go' }), cuePrompt({})]).toEqual(['Go', null])
  })

  it('{seconds}: sleeps from the first start, completes when due', async () => {
    const first = await waitStep.execute(makeStepContext({ seconds: 90 }, { now: T0 }))
    expect(first).toEqual({ type: 'sleep', until: at(90_000) })
    // Re-entry: counted from startedAt, not from now.
    const early = await waitStep.execute(
      makeStepContext(
        { seconds: 90 },
        { now: at(60_000), step: { startedAt: T0, resumed: true, wakeAt: at(90_000) } },
      ),
    )
    expect(early).toEqual({ type: 'sleep', until: at(90_000) })
    const due = await waitStep.execute(
      makeStepContext(
        { seconds: 90 },
        { now: at(90_000), step: { startedAt: T0, resumed: true, wakeAt: at(90_000) } },
      ),
    )
    expect(due.type).toBe('completed')
    expect(await waitStep.execute(makeStepContext({ seconds: 0 }, { now: T0 }))).toMatchObject({
      type: 'completed',
    })
  })

  it("{until}: counts from the run's scheduledFor, completes at once when already past", async () => {
    const run = { scheduledFor: T0 }
    expect(await waitStep.execute(makeStepContext({ until: '+15m' }, { now: at(60_000), run }))).toEqual({
      type: 'sleep',
      until: at(15 * 60_000),
    })
    expect(
      await waitStep.execute(makeStepContext({ until: '+15m' }, { now: at(20 * 60_000), run })),
    ).toMatchObject({
      type: 'completed',
    })
    expect(await waitStep.execute(makeStepContext({ until: '+0s' }, { now: T0, run }))).toMatchObject({
      type: 'completed',
    })
  })
})

describe('core.cue', () => {
  it('validates', () => {
    expect(cueStep.validate({ prompt: 'Open the gates' })).toEqual([])
    expect(cueStep.validate({ prompt: 'x', timeoutSeconds: 60, onTimeout: 'continue' })).toEqual([])
    expect(cueStep.validate({ prompt: '  ' })).toEqual([{ path: 'prompt', message: 'must not be empty' }])
    expect(cueStep.validate({ prompt: 'x'.repeat(501) })[0]!.message).toMatch(/500/)
    expect(cueStep.validate({ prompt: 'x', timeoutSeconds: 0 })[0]).toMatchObject({ path: 'timeoutSeconds' })
    expect(cueStep.validate({ prompt: 'x', timeoutSeconds: 8 * 86400 })[0]!.message).toMatch(/7 days/)
    expect(cueStep.validate({ prompt: 'x', timeoutSeconds: 1.5 })[0]!.message).toMatch(/whole number/)
    expect(cueStep.validate({ prompt: 'x', onTimeout: 'shrug' })[0]!.message).toBe(
      'must be "fail" or "continue"',
    )
  })

  it('parks without a timeout', async () => {
    expect(await cueStep.execute(makeStepContext({ prompt: 'Go' }))).toEqual({ type: 'park', until: null })
  })

  it('parks until the timeout, then continues with timedOut', async () => {
    const params = { prompt: 'Go', timeoutSeconds: 60, onTimeout: 'continue' as const }
    expect(await cueStep.execute(makeStepContext(params, { now: T0 }))).toEqual({
      type: 'park',
      until: at(60_000),
    })
    const step = { startedAt: T0, resumed: true, wakeAt: at(60_000) }
    expect(await cueStep.execute(makeStepContext(params, { now: at(30_000), step }))).toEqual({
      type: 'park',
      until: at(60_000),
    })
    const ctx = makeStepContext(params, { now: at(60_000), step })
    expect(await cueStep.execute(ctx)).toEqual({ type: 'completed', result: { timedOut: true } })
    expect(ctx.lines[0]!.level).toBe('warn')
  })

  it('fails for good on timeout by default', async () => {
    const ctx = makeStepContext(
      { prompt: 'Go', timeoutSeconds: 60 },
      { now: at(61_000), step: { startedAt: T0, resumed: true, wakeAt: at(60_000) } },
    )
    const err = await cueStep.execute(ctx).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(StepFailure)
    expect((err as StepFailure).retryable).toBe(false)
    expect((err as StepFailure).message).toMatch(/cue timed out after 60s.*Go/)
  })

  it('fails at execution when rendered params are invalid', async () => {
    const err = await cueStep.execute(makeStepContext({ prompt: '' })).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(StepFailure)
    expect((err as StepFailure).retryable).toBe(false)
    expect((err as StepFailure).message).toMatch(
      /core\.cue: invalid params after rendering: prompt: must not be empty/,
    )
  })
})

describe('core.webhook params', () => {
  it('accepts the documented shapes', () => {
    expect(webhookStep.validate({ url: 'https://hooks.example.com/x' })).toEqual([])
    expect(
      webhookStep.validate({
        url: 'https://hooks.example.com/x',
        method: 'PUT',
        headers: { Authorization: 'Bearer t', 'X-Thing': 'a' },
        body: { content: '{{definition.title}}', n: [1, 2] },
      }),
    ).toEqual([])
    // A templated URL is checked when it is known, at run time.
    expect(webhookStep.validate({ url: 'https://{{params.host}}/x' })).toEqual([])
  })

  it('lists every problem', () => {
    const problems = webhookStep.validate({
      url: 'ftp://files.example.com/',
      method: 'HEAD',
      headers: { Host: 'evil', 'Content-Length': '1', 'Idempotency-Key': 'mine', 'Bad Name': 'x', 'X-N': 5 },
      extra: true,
    })
    expect(problems).toEqual([
      {
        path: 'url',
        message: 'must be an absolute http(s) URL; this one uses ftp: only http and https are allowed',
      },
      { path: 'method', message: 'must be one of GET, POST, PUT, PATCH, DELETE' },
      { path: 'headers["X-N"]', message: 'must be a string' },
      { path: 'extra', message: 'unknown key (allowed: url, method, headers, body)' },
    ])
    const headerProblems = webhookStep.validate({
      url: 'https://a.example/',
      headers: {
        Host: 'evil',
        'Content-Length': '1',
        'Idempotency-Key': 'mine',
        'Bad Name': 'x',
        Connection: 'close',
      },
    })
    expect(headerProblems.map((p) => p.path)).toEqual([
      'headers.Host',
      'headers["Content-Length"]',
      'headers["Idempotency-Key"]',
      'headers["Bad Name"]',
      'headers.Connection',
    ])
    expect(headerProblems[2]!.message).toMatch(/set by the runner/)
    expect(webhookStep.validate({ url: 'https://user:pw@a.example/' })[0]!.message).toMatch(/credentials/)
    expect(webhookStep.validate({ url: 'https://a.example/', method: 'GET', body: {} })).toEqual([
      { path: 'body', message: 'a GET request cannot have a body' },
    ])
    expect(webhookStep.validate({})).toEqual([{ path: 'url', message: 'is required (string)' }])
  })

  it('describes what a rehearsal would send', () => {
    const ctx = makeStepContext({
      url: 'https://hooks.example.com/x',
      headers: { Authorization: 'secret' },
      body: { content: 'hi' },
    })
    const text = webhookStep.describe!(ctx)
    expect(text).toBe('POST https://hooks.example.com/x with headers Authorization and body {"content":"hi"}')
    expect(text).not.toContain('secret')
  })
})
