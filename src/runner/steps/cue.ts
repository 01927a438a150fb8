/**
 * `core.cue {prompt, timeoutSeconds?, onTimeout?}`: park the step until a person
 * answers (`resolveCue` or `skipStep`, which finish the step without calling
 * this handler again). The handler is re-entered only when a timed park comes
 * due: then `onTimeout` decides between failing the step (default) and going on.
 */
import { z } from 'zod'
import { showTimeAfter } from '../speed.ts'
import { parseParams, schemaProblems } from './params.ts'
import { StepFailure, type StepKind } from './types.ts'

/** Longest cue timeout. */
export const MAX_CUE_TIMEOUT_SECONDS = 7 * 24 * 3600

const schema = z.strictObject({
  prompt: z
    .string()
    .refine((s) => s.trim() !== '', 'must not be empty')
    .refine((s) => s.length <= 500, 'must be at most 500 characters'),
  timeoutSeconds: z
    .int('must be a whole number of seconds')
    .min(1, 'must be at least 1')
    .max(MAX_CUE_TIMEOUT_SECONDS, `must be at most ${MAX_CUE_TIMEOUT_SECONDS} (7 days)`)
    .optional(),
  onTimeout: z.enum(['fail', 'continue'], 'must be "fail" or "continue"').optional(),
})

export type CueParams = z.infer<typeof schema>

export const cueStep: StepKind<CueParams> = {
  kind: 'core.cue',
  sideEffects: false,
  validate: (params) => schemaProblems(schema, params, ['prompt', 'timeoutSeconds', 'onTimeout']),
  async execute(ctx) {
    const { prompt, timeoutSeconds, onTimeout = 'fail' } = parseParams(schema, ctx.params, 'core.cue')
    const now = ctx.now()
    // The runner logs the prompt when it parks the step; nothing to add here.
    if (timeoutSeconds === undefined) return { type: 'park', until: null }
    // The deadline counts from the first start, so a re-entry never extends it.
    const deadline =
      ctx.step.resumed && ctx.step.wakeAt
        ? ctx.step.wakeAt
        : showTimeAfter(ctx.step.startedAt ?? now, timeoutSeconds, ctx.run.speed)
    if (now.getTime() < deadline.getTime()) return { type: 'park', until: deadline }
    if (onTimeout === 'continue') {
      await ctx.log('warn', `Cue timed out after ${timeoutSeconds}s without an answer; continuing: ${prompt}`)
      return { type: 'completed', result: { timedOut: true } }
    }
    throw new StepFailure(`cue timed out after ${timeoutSeconds}s without an answer: ${prompt}`, {
      retryable: false,
    })
  },
}
