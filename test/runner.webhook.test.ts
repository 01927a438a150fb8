/**
 * Webhook steps through the runner against a real HTTP receiver, with a
 * hand-moved clock for the backoffs: retries carry one Idempotency-Key and
 * degrade the run meanwhile; the allow-list refuses before any request;
 * onError "degrade"; rehearsals send nothing.
 */
import { expect, it } from 'vitest'
import { startRun } from '../src/operations/runControls.ts'
import { Runner } from '../src/runner/runner.ts'
import { parseAllowList } from '../src/runner/steps/allowList.ts'
import { useTestDb } from './helpers/db.ts'
import {
  controlDeps,
  defineEvent,
  logLines,
  makeRegistry,
  program,
  type RunnerTestEnv,
  runOf,
  stepsOf,
  TestClock,
  useReceiver,
} from './helpers/runnerHarness.ts'

const t = useTestDb()
const receiver = useReceiver({ resetEach: true })

function setup(allow = `${receiver.url}/hooks/`) {
  const clock = new TestClock()
  const env: RunnerTestEnv = { db: t.db, registry: makeRegistry(), clock }
  const runner = new Runner({
    db: t.db,
    registry: env.registry,
    clock,
    settings: { webhookAllow: parseAllowList(allow).prefixes },
  })
  return { clock, env, runner }
}

it('fails twice (HTTP 500) then succeeds: DEGRADED during the backoff, OK after; three calls, one Idempotency-Key', async () => {
  receiver.route('/hooks/flaky', (_call, n) => ({ status: n <= 2 ? 500 : 200, body: n <= 2 ? 'boom' : 'ok' }))
  const { clock, env, runner } = setup()
  const def = await defineEvent(env, {
    title: 'Show',
    program: program([
      'announce',
      [
        {
          kind: 'core.webhook',
          params: {
            url: `${receiver.url}/hooks/flaky`,
            body: { content: '{{definition.title}} in {{run.scope}}' },
          },
          retry: { attempts: 5, backoffSeconds: 1 },
        },
        { kind: 'core.log', params: { message: 'announced' } },
      ],
    ]),
  })
  const run = await startRun(controlDeps(env), { definitionId: def.id, scope: 'stage', actor: 'op#1' })

  await runner.tick()
  let [hook] = await stepsOf(t.db, run.id)
  expect(hook).toMatchObject({ status: 'pending', attempts: 1 })
  expect(hook!.lastError).toMatch(/HTTP 500/)
  expect(await runOf(t.db, run.id)).toMatchObject({ status: 'running', health: 'degraded', claimedBy: null })
  expect(receiver.calls).toHaveLength(1)

  // Not due yet: nothing is sent before the backoff (≥ 0.5 s for attempt 1) passes.
  clock.advance(400)
  await runner.tick()
  expect(receiver.calls).toHaveLength(1)

  clock.advance(600) // 1 s after the failure: the first backoff (0.5–1 s) is over
  await runner.tick()
  ;[hook] = await stepsOf(t.db, run.id)
  expect(hook).toMatchObject({ status: 'pending', attempts: 2 })
  expect((await runOf(t.db, run.id)).health).toBe('degraded')
  expect(receiver.calls).toHaveLength(2)

  clock.advance(2000) // the second backoff is 1–2 s
  await runner.tick()
  ;[hook] = await stepsOf(t.db, run.id)
  expect(hook).toMatchObject({ status: 'completed', attempts: 3, lastError: null })
  const done = await runOf(t.db, run.id)
  expect(done).toMatchObject({ status: 'completed', health: 'ok' })

  expect(receiver.calls).toHaveLength(3)
  const keys = new Set(receiver.calls.map((c) => c.key))
  expect([...keys]).toEqual([`${run.id}-${hook!.id}`])
  expect(JSON.parse(receiver.calls[2]!.body)).toEqual({ content: 'Show in stage' })
  const log = await logLines(t.db, run.id)
  expect(log.filter((l) => /attempt \d of 5 failed: .*HTTP 500/.test(l))).toHaveLength(2)
})

it('an allow-list miss fails the step and the run without any request reaching the receiver', async () => {
  const { env, runner } = setup()
  const def = await defineEvent(env, {
    program: program(['main', [{ kind: 'core.webhook', params: { url: `${receiver.url}/elsewhere/hook` } }]]),
  })
  const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
  await runner.tick()
  const r = await runOf(t.db, run.id)
  expect(r.status).toBe('failed')
  expect(r.lastError).toMatch(/allow-list/)
  expect(r.lastError).toContain(`${receiver.url}/elsewhere/hook`)
  const [step] = await stepsOf(t.db, run.id)
  // Not retryable: one attempt, no backoff.
  expect(step).toMatchObject({ status: 'failed', attempts: 1 })
  expect(receiver.calls).toHaveLength(0)
})

it('onError "degrade": the step FAILS after its attempts, the run goes on DEGRADED and completes', async () => {
  receiver.route('/hooks/down', () => ({ status: 503 }))
  const { clock, env, runner } = setup()
  const def = await defineEvent(env, {
    program: program([
      'main',
      [
        {
          kind: 'core.webhook',
          params: { url: `${receiver.url}/hooks/down` },
          retry: { attempts: 2, backoffSeconds: 1 },
          onError: 'degrade',
        },
        { kind: 'core.log', params: { message: 'after the webhook' } },
      ],
    ]),
  })
  const run = await startRun(controlDeps(env), { definitionId: def.id, actor: 'op#1' })
  await runner.tick()
  expect((await runOf(t.db, run.id)).health).toBe('degraded')
  clock.advance(1000)
  await runner.tick()
  const steps = await stepsOf(t.db, run.id)
  expect(steps.map((s) => s.status)).toEqual(['failed', 'completed'])
  expect(steps[0]!.lastError).toMatch(/HTTP 503/)
  const r = await runOf(t.db, run.id)
  expect(r).toMatchObject({ status: 'completed', health: 'degraded' })
  expect(receiver.calls).toHaveLength(2)
  expect(await logLines(t.db, run.id)).toContain('after the webhook')
})

it('a rehearsal sends nothing, logs what it would have sent, and completes', async () => {
  const { clock, env, runner } = setup()
  const def = await defineEvent(env, {
    title: 'Gala',
    program: program([
      'main',
      [
        {
          kind: 'core.webhook',
          params: {
            url: `${receiver.url}/hooks/announce`,
            headers: { Authorization: 'Bearer secret-value' },
            body: { content: '{{definition.title}} starts soon' },
          },
        },
        { kind: 'core.cue', params: { prompt: 'Curtain?', timeoutSeconds: 1, onTimeout: 'continue' } },
      ],
    ]),
  })
  const run = await startRun(controlDeps(env), { definitionId: def.id, rehearsal: true, actor: 'op#1' })
  await runner.tick()
  // Rehearsals walk cues too: this one is parked.
  expect(await runOf(t.db, run.id)).toMatchObject({ status: 'running', waitingSteps: 1 })
  clock.advance(1000) // the cue's timeout: onTimeout "continue"
  await runner.tick()
  expect(await runOf(t.db, run.id)).toMatchObject({ status: 'completed', health: 'ok', rehearsal: true })
  expect(receiver.calls).toHaveLength(0)
  const log = await logLines(t.db, run.id)
  const would = log.find((l) => l.startsWith('rehearsal: would'))
  expect(would).toContain(`POST ${receiver.url}/hooks/announce`)
  expect(would).toContain('Gala starts soon')
  expect(would).not.toContain('secret-value')
})
