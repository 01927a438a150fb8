/**
 * A worked example of a custom step kind: `acme.lights` sets a lighting scene
 * through a (pretend) lighting desk. docs/step-kinds.md walks through it, and
 * test/examples.customStep.test.ts registers it in a real server and runs it.
 *
 * What a kind promises the runner:
 * - `validate` checks params when a version is published, so a typo is refused
 *   then, not at showtime;
 * - `execute` performs ONE attempt; the runner owns retries, backoff and the
 *   timeout (`ctx.signal` aborts when it passes). A thrown `StepFailure` with
 *   `retryable: false` fails the step at once; any other throw is retried;
 * - `ctx.idempotencyKey` is the same on every attempt of this step of this run,
 *   so the receiving system can drop a repeat: steps run at least once;
 * - `sideEffects: true` means a rehearsal logs `describe(ctx)` instead of
 *   executing;
 * - `inline` (finishes at once, writes only `ctx.log`) and `pure` (inline, and
 *   touches no database, network or timer) are optimisations for kinds like
 *   `core.log`; a kind that calls out to anything must leave both unset.
 */
import { z } from 'zod'
import { parseParams, schemaProblems } from '../src/runner/steps/params.ts'
import { type StepKind, StepFailure } from '../src/runner/steps/types.ts'

const lightsParams = z.strictObject({
  scene: z.string().min(1, 'must not be empty').max(100),
  fadeSeconds: z.number().min(0).max(60).optional(),
})

export type LightsParams = z.infer<typeof lightsParams>

/** What the desk is told; a real kind would send this over the network. */
export interface LightingCommand {
  scene: string
  fadeSeconds: number
  idempotencyKey: string
}

/** The (pretend) lighting desk: answers false when it refuses a scene. */
export type LightingDesk = (command: LightingCommand, signal: AbortSignal) => Promise<boolean>

export function lightsStep(desk: LightingDesk): StepKind<LightsParams> {
  return {
    kind: 'acme.lights',
    sideEffects: true,
    validate: (params) => schemaProblems(lightsParams, params, ['scene', 'fadeSeconds']),
    async execute(ctx) {
      // Params arrive rendered: `{{run.scope}}` in a scene name is already the scope.
      const { scene, fadeSeconds = 0 } = parseParams(lightsParams, ctx.params, 'acme.lights')
      const accepted = await desk({ scene, fadeSeconds, idempotencyKey: ctx.idempotencyKey }, ctx.signal)
      // The desk knows no such scene: retrying will not help.
      if (!accepted) throw new StepFailure(`the lighting desk has no scene "${scene}"`, { retryable: false })
      await ctx.log('info', `lights: ${scene} (fade ${fadeSeconds} s)`)
      return { type: 'completed', result: { scene } }
    },
    describe: (ctx) => `would set the lights to "${String(ctx.params.scene)}"`,
  }
}
