/** `core.log {message, level?}`: a line in the run's log. */
import { z } from 'zod'
import { parseParams, schemaProblems } from './params.ts'
import type { StepKind } from './types.ts'

/** Longest message, so a runaway template cannot flood the log table. */
const MAX_MESSAGE = 10_000

const schema = z.strictObject({
  message: z.string().max(MAX_MESSAGE, `must be at most ${MAX_MESSAGE} characters`),
  level: z.enum(['debug', 'info', 'warn', 'error'], 'must be one of debug, info, warn, error').optional(),
})

export type LogParams = z.infer<typeof schema>

export const logStep: StepKind<LogParams> = {
  kind: 'core.log',
  sideEffects: false,
  inline: true,
  pure: true,
  validate: (params) => schemaProblems(schema, params, ['message', 'level']),
  async execute(ctx) {
    const { message, level = 'info' } = parseParams(schema, ctx.params, 'core.log')
    await ctx.log(level, message)
    return { type: 'completed' }
  },
}
