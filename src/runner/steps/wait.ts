/**
 * `core.wait {seconds}` or `{until: "+15m"}`: a durable timer. The runner stores
 * the `sleep` outcome as the step's wake time and holds no lease meanwhile.
 * - `seconds` counts from the step's first start, so a re-entry (or a retry after
 *   a crash) does not restart the clock (a re-entry reads the stored wake time);
 * - `until` counts from the run's `scheduledFor`, so "+15m" means a quarter past
 *   the show's start however late the run got going (plus any time the run
 *   spent paused during this wait: a pause holds the show's time). Forms: `+Ns`, `+Nm`, `+Nh`,
 *   `+Nd` (the `+` is optional). Negative offsets are refused: a run never
 *   starts before its scheduled time, so they would always be in the past.
 */
import { z } from 'zod'
import { showTimeAfter } from '../speed.ts'
import { parseParams, schemaProblems } from './params.ts'
import { parseOffset } from './paramText.ts'
import type { StepKind } from './types.ts'

/** Longest wait, either form. */
export const MAX_WAIT_SECONDS = 30 * 24 * 3600

// The offset is read the one way the console reads it too (paramText.ts).
export { parseOffset }

const schema = z
  .strictObject({
    seconds: z
      .number()
      .min(0, 'must be ≥ 0')
      .max(MAX_WAIT_SECONDS, `must be at most ${MAX_WAIT_SECONDS} (30 days)`)
      .optional(),
    until: z
      .string()
      .superRefine((value, ctx) => {
        if (/^\s*-/.test(value)) {
          ctx.addIssue({
            code: 'custom',
            message:
              "must not be negative: it counts from the run's scheduled time, before which no run starts",
          })
          return
        }
        const seconds = parseOffset(value)
        if (seconds === null) {
          ctx.addIssue({
            code: 'custom',
            message: `must be an offset like "+30s", "+15m", "+2h" or "+1d" from the run's scheduled time; got ${JSON.stringify(value)}`,
          })
        } else if (seconds > MAX_WAIT_SECONDS) {
          ctx.addIssue({ code: 'custom', message: 'must be at most 30 days' })
        }
      })
      .optional(),
  })
  .superRefine((p, ctx) => {
    if ((p.seconds === undefined) === (p.until === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'give exactly one of "seconds" or "until"' })
    }
  })

export type WaitParams = z.infer<typeof schema>

export const waitStep: StepKind<WaitParams> = {
  kind: 'core.wait',
  sideEffects: false,
  // Its attempt ends at once: no slot of RUNNER_PARALLELISM, and a due one
  // resumes with no lease of its own (executor/decide.ts `resumesWithoutLease`).
  inline: true,
  validate: (params) => schemaProblems(schema, params, ['seconds', 'until']),
  async execute(ctx) {
    const p = parseParams(schema, ctx.params, 'core.wait')
    const now = ctx.now()
    // A rehearsal at speed passes the show's time faster (speed.ts). A re-entry
    // keeps the stored wake time: a resume after a pause moved it later by the
    // pause's length (pauseHold.ts), which counting again from the start or the
    // scheduled time would undo.
    const wakeAt =
      ctx.step.resumed && ctx.step.wakeAt
        ? ctx.step.wakeAt
        : p.seconds !== undefined
          ? showTimeAfter(ctx.step.startedAt ?? now, p.seconds, ctx.run.speed)
          : showTimeAfter(ctx.run.scheduledFor, parseOffset(p.until!)!, ctx.run.speed)
    // One rule for first entry and re-entry: a timer that came due early sleeps again.
    if (wakeAt.getTime() > now.getTime()) return { type: 'sleep', until: wakeAt }
    return { type: 'completed', result: { wakeAt: wakeAt.toISOString() } }
  },
}
