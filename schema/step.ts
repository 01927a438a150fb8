/** `RunStep`: one step of a run's expanded program. */
import {
  redactStepParams,
  seesLiterals,
  seesResponseBodies,
  withheldResponseQuote,
  withheldWebhookResult,
} from '../src/api/redact.ts'
import { StepStatusEnum } from './enums.ts'
import { EventRunRef, RunStepRef, WaitingStepsChangeRef } from './refs.ts'

RunStepRef.implement({
  description:
    'A step is executing (RUNNING with a claim), parked on a person (RUNNING, parked: a cue), sleeping (a timer or retry backoff, wakeAt in the future) or done.',
  fields: (t) => ({
    id: t.exposeID('id'),
    run: t.field({
      type: EventRunRef,
      resolve: async (step, _args, ctx) => {
        const run = await ctx.loaders.run.load(step.runId)
        if (!run) throw new Error(`run ${step.runId} is missing`)
        return run
      },
    }),
    seq: t.exposeInt('seq', { description: 'Position within the run, 0-based across phases.' }),
    phase: t.exposeString('phase'),
    kind: t.exposeString('kind'),
    params: t.field({
      type: 'JSON',
      nullable: true,
      description:
        'The step\'s params as published. Literal webhook header values read as "[redacted]" unless the caller is an admin.',
      resolve: (step, _args, ctx) =>
        seesLiterals(ctx) ? step.params : redactStepParams(step.kind, step.params),
    }),
    status: t.expose('status', { type: StepStatusEnum }),
    parked: t.exposeBoolean('parked', { description: 'Waiting on a person (resolveCue or skipStep).' }),
    attempts: t.exposeInt('attempts'),
    maxAttempts: t.exposeInt('maxAttempts'),
    wakeAt: t.field({
      type: 'DateTime',
      nullable: true,
      description:
        'When the step is due next. Null while its run is PAUSED: the pause holds the time, and at resume the step continues with what it had left (this field then reads the shifted instant).',
      // The run is looked up only for a step that has a wake time (batched, usually primed).
      resolve: async (step, _args, ctx) =>
        step.wakeAt && (await ctx.loaders.run.load(step.runId))?.status === 'paused' ? null : step.wakeAt,
    }),
    startedAt: t.expose('startedAt', { type: 'DateTime', nullable: true }),
    endedAt: t.expose('endedAt', { type: 'DateTime', nullable: true }),
    lastError: t.string({
      nullable: true,
      description:
        'Why the last attempt failed. A quoted webhook response body reads as withheld unless the caller is an operator or admin.',
      resolve: (step, _args, ctx) =>
        seesResponseBodies(ctx) ? step.lastError : withheldResponseQuote(step.lastError),
    }),
    result: t.field({
      type: 'JSON',
      nullable: true,
      description:
        "What the step answered. A webhook's response body reads as withheld (with its size in bodyBytes) unless the caller is an operator or admin.",
      resolve: (step, _args, ctx) =>
        seesResponseBodies(ctx) ? step.result : withheldWebhookResult(step.kind, step.result),
    }),
  }),
})

WaitingStepsChangeRef.implement({
  description:
    'What changed in a cue inbox since the last event of waitingStepChanges. The first event has reset: true and the whole inbox in added; later ones the cues new to the inbox or changed since (put them in, or replace them by id) and the ids of those that left it (answered, skipped, timed out, or pushed past limit by older ones). Keep the inbox sorted by startedAt, oldest first.',
  fields: (t) => ({
    reset: t.exposeBoolean('reset', {
      description: 'True on the first event only: added is then the whole inbox.',
    }),
    added: t.field({
      type: [RunStepRef],
      description: 'Cues new to the inbox, or changed since the last event, oldest first.',
      resolve: (c) => c.added,
    }),
    removed: t.field({
      type: ['ID'],
      description: 'Ids of the cues that left the inbox since the last event.',
      resolve: (c) => c.removed,
    }),
  }),
})
