/** `Cue` and `CueAnswer`: where a cue's ladder stands and who answered it; `RunStep.cue`. */
import type { CueAnswerRow, LadderRow } from '../sql/cueLadders.ts'
import { builder } from './builder.ts'
import { RunStepRef } from './refs.ts'

export const CueAnswerRef = builder.objectRef<CueAnswerRow>('CueAnswer').implement({
  description: 'Who answered a cue, how and when.',
  fields: (t) => ({
    outcome: t.exposeString('outcome', { description: 'resolved | skipped | timedOut' }),
    by: t.exposeString('by', {
      description: "The person's name; for an answer link, the channel's name; `timeout` for a timeout.",
    }),
    via: t.exposeString('via', { description: 'api | console | link | timeout' }),
    at: t.expose('at', { type: 'DateTime' }),
    note: t.exposeString('note', { nullable: true }),
  }),
})

export const CueRef = builder.objectRef<LadderRow>('Cue').implement({
  description:
    "A cue's ladder: who it is for (escalations add to assignees), the reminders and escalations sent so far, its deadline, and its answer once it has one.",
  fields: (t) => ({
    prompt: t.exposeString('prompt'),
    openedAt: t.expose('openedAt', { type: 'DateTime' }),
    deadlineAt: t.field({
      type: 'DateTime',
      nullable: true,
      description:
        "When the cue times out (timeoutSeconds). Null while its run is PAUSED: the pause holds the cue's time, and at resume the deadline reads later by the pause's length.",
      resolve: async (l, _args, ctx) =>
        l.deadlineAt && (await ctx.loaders.run.load(l.runId))?.status === 'paused' && !l.answer
          ? null
          : l.deadlineAt,
    }),
    assignees: t.exposeStringList('assignees', {
      description: 'Names and team:NAME entries; empty = anyone who may operate.',
    }),
    exclusive: t.exposeBoolean('exclusive', {
      description: 'Only the assignees (and admins) may answer; others get FORBIDDEN.',
    }),
    escalationLevel: t.exposeInt('escalationLevel'),
    remindersSent: t.exposeInt('remindersSent'),
    answer: t.field({ type: CueAnswerRef, nullable: true, resolve: (l) => l.answer }),
  }),
})

builder.objectField(RunStepRef, 'cue', (t) =>
  t.field({
    type: CueRef,
    nullable: true,
    description: 'The ladder of a core.cue step once it has opened; null for other kinds.',
    resolve: (step, _args, ctx) => (step.kind === 'core.cue' ? ctx.loaders.cueLadder.load(step.id) : null),
  }),
)
