/**
 * `core.cue {prompt, assignee?, exclusive?, remindAfterSeconds?, escalate?,
 * timeoutSeconds?, onTimeout?}`: park the step until a person answers
 * (`resolveCue` or `skipStep`, which finish the step without calling this
 * handler again). The handler is re-entered only when a timed park comes due:
 * at each rung of the cue's ladder (a reminder, an escalation), which the
 * ladder applies once (see src/runner/cueLadder.ts), and at the deadline, where
 * `onTimeout` decides between failing the step (default) and going on.
 */
import { z } from 'zod'
import { showTimeAfter } from '../speed.ts'
import { parseParams, schemaProblems } from './params.ts'
import { type CuePlan, StepFailure, type StepKind } from './types.ts'

/** Longest cue timeout. */
export const MAX_CUE_TIMEOUT_SECONDS = 7 * 24 * 3600
/** Most reminders or escalations one cue may have. */
export const MAX_RUNGS = 20

/** A person's name or `team:NAME`. */
const assigneeName = z
  .string()
  .refine((s) => s.trim() !== '', 'must not be empty')
  .refine((s) => s.length <= 191, 'must be at most 191 characters')
  .refine((s) => s !== 'team:', 'must name the team after "team:"')

const rungSeconds = z
  .int('must be a whole number of seconds')
  .min(1, 'must be at least 1')
  .max(MAX_CUE_TIMEOUT_SECONDS, `must be at most ${MAX_CUE_TIMEOUT_SECONDS} (7 days)`)

const schema = z
  .strictObject({
    prompt: z
      .string()
      .refine((s) => s.trim() !== '', 'must not be empty')
      .refine((s) => s.length <= 500, 'must be at most 500 characters'),
    assignee: assigneeName.optional(),
    exclusive: z.boolean('must be true or false').optional(),
    remindAfterSeconds: z
      .array(rungSeconds, 'must be a list of seconds, e.g. [300, 900]')
      .max(MAX_RUNGS, `must have at most ${MAX_RUNGS} reminders`)
      .optional(),
    escalate: z
      .array(
        z.strictObject(
          { afterSeconds: rungSeconds, to: assigneeName },
          {
            error: (issue) =>
              issue.code === 'unrecognized_keys'
                ? 'unknown key (allowed: afterSeconds, to)'
                : 'must be an object {afterSeconds, to}',
          },
        ),
        'must be a list of {afterSeconds, to}',
      )
      .max(MAX_RUNGS, `must have at most ${MAX_RUNGS} escalations`)
      .optional(),
    timeoutSeconds: rungSeconds.optional(),
    onTimeout: z.enum(['fail', 'continue'], 'must be "fail" or "continue"').optional(),
  })
  .superRefine((p, ctx) => {
    // A rung at or after the deadline would never be sent: the cue is closed by then.
    const limit = p.timeoutSeconds
    if (limit === undefined) return
    p.remindAfterSeconds?.forEach((s, i) => {
      if (s >= limit)
        ctx.addIssue({
          code: 'custom',
          path: ['remindAfterSeconds', i],
          message: `must be before timeoutSeconds (${limit})`,
        })
    })
    p.escalate?.forEach((e, i) => {
      if (e.afterSeconds >= limit)
        ctx.addIssue({
          code: 'custom',
          path: ['escalate', i, 'afterSeconds'],
          message: `must be before timeoutSeconds (${limit})`,
        })
    })
  })

export type CueParams = z.infer<typeof schema>

const ALLOWED_KEYS = [
  'prompt',
  'assignee',
  'exclusive',
  'remindAfterSeconds',
  'escalate',
  'timeoutSeconds',
  'onTimeout',
]

export const cueStep: StepKind<CueParams> = {
  kind: 'core.cue',
  sideEffects: false,
  // No slot of RUNNER_PARALLELISM: a round's cues all ask for their ladders in
  // one turn, and the ladder opens them together (one transaction for the lot).
  inline: true,
  validate: (params) => schemaProblems(schema, params, ALLOWED_KEYS),
  async execute(ctx) {
    const p = parseParams(schema, ctx.params, 'core.cue')
    const { prompt, timeoutSeconds, onTimeout = 'fail' } = p
    const now = ctx.now()
    const openedAt = ctx.step.startedAt ?? now
    let deadline: Date | null
    let nextAt: Date | null
    const ladder = ctx.settings.cueLadder
    if (ladder) {
      const plan: CuePlan = {
        run: ctx.run,
        stepId: ctx.step.id,
        prompt,
        assignees: p.assignee === undefined ? [] : [p.assignee],
        exclusive: p.exclusive === true,
        remindAfterSeconds: [...(p.remindAfterSeconds ?? [])].sort((a, b) => a - b),
        escalate: [...(p.escalate ?? [])].sort((a, b) => a.afterSeconds - b.afterSeconds),
        timeoutSeconds,
        openedAt,
        firstEntry: !ctx.step.resumed && ctx.step.attempt === 1,
      }
      const state = await ladder.sync(plan, now)
      deadline = state.deadlineAt
      nextAt = state.nextAt
    } else {
      // The deadline counts from the first start, so a re-entry never extends it.
      deadline =
        timeoutSeconds === undefined
          ? null
          : ctx.step.resumed && ctx.step.wakeAt
            ? ctx.step.wakeAt
            : showTimeAfter(openedAt, timeoutSeconds, ctx.run.speed)
      nextAt = deadline
    }
    // The runner logs the prompt when it parks the step; nothing to add here.
    if (deadline === null || now.getTime() < deadline.getTime()) return { type: 'park', until: nextAt }
    if (onTimeout === 'continue') {
      await ctx.log('warn', `Cue timed out after ${timeoutSeconds}s without an answer; continuing: ${prompt}`)
      return { type: 'completed', result: { timedOut: true } }
    }
    throw new StepFailure(`cue timed out after ${timeoutSeconds}s without an answer: ${prompt}`, {
      retryable: false,
    })
  },
}
