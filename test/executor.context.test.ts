/**
 * src/runner/executor/context.ts: the StepContext every execution path builds.
 * Its `now` and `log` keep working when a step kind takes them off the context,
 * and its templates see the run's names, its scheduled instant as ISO-8601 UTC.
 */
import { expect, it } from 'vitest'
import type { NewLog } from '../sql/eventRunLogs.ts'
import type { RunRow } from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import { stepContext } from '../src/runner/executor/context.ts'

const at = new Date('2026-06-01T18:30:00.250Z')
const run = {
  id: 41,
  definitionId: 3,
  scope: 'hall-b',
  scheduledFor: at,
  timezone: 'Europe/Paris',
  params: { band: 'The Tides' },
  rehearsal: false,
} as Partial<RunRow> as RunRow
const step = {
  id: 97,
  seq: 2,
  phase: 'main',
  kind: 'core.log',
  params: { message: '{{definition.slug}} {{run.scope}} {{run.id}} {{run.scheduledFor}} {{params.band}}' },
  attempts: 1,
  maxAttempts: 3,
  timeoutMs: 5000,
  wakeAt: null,
  startedAt: at,
} as Partial<StepRow> as StepRow

it('builds a context whose now and log work taken off it, with the run’s names in its templates', async () => {
  const lines: NewLog[] = []
  const clock = { now: () => new Date('2026-06-01T18:30:01Z') }
  const ctx = stepContext(
    { clock, owner: 'runner-a', settings: { webhookAllow: [] } },
    { log: async (line) => void lines.push(line) },
    run,
    step,
    { title: 'Gig', slug: 'gig' },
    false,
    new AbortController().signal,
  )
  expect(ctx.params).toEqual({ message: 'gig hall-b 41 2026-06-01T18:30:00.250Z The Tides' })
  expect(ctx.idempotencyKey).toBe('41-97')
  const { now, log } = ctx
  expect(now()).toEqual(new Date('2026-06-01T18:30:01Z'))
  await log('warn', 'doors late', { minutes: 5 })
  expect(lines).toEqual([
    { runId: 41, stepId: 97, level: 'warn', message: 'doors late', data: { minutes: 5 }, actor: 'runner-a' },
  ])
})
