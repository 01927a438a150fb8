/** Steps: what waits on people (viewer), and answering or skipping a step (operator). */

import { builder } from '../schema/builder.ts'
import { RunStepRef, StepResultRef } from '../schema/refs.ts'
import * as steps from '../sql/eventSteps/index.ts'
import { parseId, withDefault } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import { resolveCue, skipStep } from '../src/operations/runControls.ts'
import { actorOf, controlDeps } from './deps.ts'

builder.queryFields((t) => ({
  waitingSteps: t.field({
    type: [RunStepRef],
    description: 'Steps parked on a person (cues), oldest first. limit is clamped to 1..500.',
    extensions: requires('viewer'),
    args: { limit: t.arg.int({ defaultValue: 100 }) },
    resolve: (_root, args, ctx) => steps.listWaiting(ctx.services.db, withDefault(args.limit, 100)),
  }),
}))

builder.mutationFields((t) => ({
  resolveCue: t.field({
    type: StepResultRef,
    description: 'Answer a parked cue: the step completes and its run continues at once.',
    extensions: requires('operator'),
    args: { stepId: t.arg.id({ required: true }), note: t.arg.string() },
    resolve: (_root, args, ctx) =>
      resolveCue(controlDeps(ctx), parseId(args.stepId, 'stepId'), actorOf(ctx), args.note ?? null),
  }),
  skipStep: t.field({
    type: StepResultRef,
    description:
      'Skip a step that has not finished (pending, sleeping, parked or executing); the run goes on.',
    extensions: requires('operator'),
    args: { stepId: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: (_root, args, ctx) =>
      skipStep(controlDeps(ctx), parseId(args.stepId, 'stepId'), actorOf(ctx), args.reason ?? null),
  }),
}))
