/** Steps: what waits on people (viewer), and answering or skipping a step (operator). */

import { builder } from '../schema/builder.ts'
import { RunStepRef, StepResultRef } from '../schema/refs.ts'
import * as cueLadders from '../sql/cueLadders.ts'
import { parseId, withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import { identitiesOf, type Person, personOf } from '../src/api/person.ts'
import { resolveCueAs, skipStepAs } from '../src/operations/cueAnswers.ts'
import { retryStepNow } from '../src/operations/retryStepNow.ts'
import { actorOf, controlDeps } from './deps.ts'

/** The caller as a person (name, teams); throws UNAUTHENTICATED without one. */
export function callerOf(ctx: ApiContext): Person {
  actorOf(ctx)
  return personOf(ctx.principal as NonNullable<ApiContext['principal']>)
}

export const MINE_DESCRIPTION =
  "mine: only cues whose assignees include the caller's name or one of its teams, and cues assigned to nobody."

builder.queryFields((t) => ({
  waitingSteps: t.field({
    type: [RunStepRef],
    description: `Steps parked on a person (cues), oldest first. limit is clamped to 1..500. ${MINE_DESCRIPTION}`,
    extensions: requires('viewer'),
    args: { limit: t.arg.int({ defaultValue: 100 }), mine: t.arg.boolean({ defaultValue: false }) },
    resolve: (_root, args, ctx) =>
      cueLadders.listWaiting(
        ctx.services.db,
        withDefault(args.limit, 100),
        args.mine ? identitiesOf(callerOf(ctx)) : null,
      ),
  }),
}))

builder.mutationFields((t) => ({
  resolveCue: t.field({
    type: StepResultRef,
    description:
      'Answer a parked cue: the step completes and its run continues at once. Of two answers one applies; the other gets applied: false and step.cue.answer names the winner. Refused with FORBIDDEN from outside an exclusive cue; applied: false after its deadline.',
    extensions: requires('operator'),
    args: { stepId: t.arg.id({ required: true }), note: t.arg.string() },
    resolve: (_root, args, ctx) =>
      resolveCueAs(
        controlDeps(ctx),
        parseId(args.stepId, 'stepId'),
        callerOf(ctx),
        args.note ?? null,
        ctx.client,
      ),
  }),
  skipStep: t.field({
    type: StepResultRef,
    description:
      'Skip a step that has not finished (pending, sleeping, parked or executing); the run goes on. Skipping a cue answers it (outcome skipped), with the same rules as resolveCue.',
    extensions: requires('operator'),
    args: { stepId: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: (_root, args, ctx) =>
      skipStepAs(
        controlDeps(ctx),
        parseId(args.stepId, 'stepId'),
        callerOf(ctx),
        args.reason ?? null,
        ctx.client,
      ),
  }),
  retryStepNow: t.field({
    type: StepResultRef,
    description:
      "Make a step's next attempt now: a step in retry backoff (PENDING after a failed attempt, attempts left, wakeAt ahead) is due at once and its run is woken; the runner makes the attempt as it would have at wakeAt (counted against maxAttempts, the same Idempotency-Key). Refused with CONFLICT (extensions.reason NOT_IN_BACKOFF, or RUN_NOT_RUNNING for a paused or finished run); applied: false when the step moved on meanwhile.",
    extensions: requires('operator'),
    args: { stepId: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) =>
      retryStepNow(controlDeps(ctx), parseId(args.stepId, 'stepId'), actorOf(ctx)),
  }),
}))
