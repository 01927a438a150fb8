import type { StepContext, StepInfo, StepRunInfo } from '../../src/runner/steps/types.ts'

export interface LoggedLine {
  level: string
  message: string
  data?: unknown
}

/** A StepContext for calling a kind's handler directly, with a fixed clock and captured log lines. */
export function makeStepContext<P = Record<string, unknown>>(
  params: P,
  opts: {
    now?: Date
    run?: Partial<StepRunInfo>
    step?: Partial<StepInfo>
    signal?: AbortSignal
    webhookAllow?: string[]
  } = {},
): StepContext<P> & { lines: LoggedLine[] } {
  const lines: LoggedLine[] = []
  const now = opts.now ?? new Date('2025-06-01T18:00:00Z')
  return {
    run: {
      id: 7,
      definitionId: 3,
      definitionTitle: 'Raid Night',
      definitionSlug: 'raid-night',
      scope: '',
      scheduledFor: new Date('2025-06-01T18:00:00Z'),
      timezone: 'UTC',
      params: null,
      rehearsal: false,
      ...opts.run,
    },
    step: {
      id: 11,
      seq: 0,
      phase: 'main',
      kind: 'test',
      attempt: 1,
      maxAttempts: 5,
      timeoutMs: 30_000,
      wakeAt: null,
      startedAt: null,
      resumed: false,
      ...opts.step,
    },
    params,
    idempotencyKey: '7-11',
    now: () => now,
    signal: opts.signal ?? new AbortController().signal,
    async log(level, message, data) {
      lines.push({ level, message, ...(data !== undefined && { data }) })
    },
    settings: { webhookAllow: opts.webhookAllow ?? [] },
    lines,
  }
}
