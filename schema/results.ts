/** `TransitionResult` and `StepResult`: what run and step controls answer. */
import { BackfillResultRef, EventRunRef, RunStepRef, StepResultRef, TransitionResultRef } from './refs.ts'

TransitionResultRef.implement({
  description:
    'applied: false is not an error: the guard did not match (another person or the runner got there first) and run is the current row.',
  fields: (t) => ({
    applied: t.exposeBoolean('applied'),
    run: t.field({ type: EventRunRef, resolve: (r) => r.run }),
  }),
})

StepResultRef.implement({
  description:
    'applied: false means the step was no longer in a state the action applies to; step is the current row.',
  fields: (t) => ({
    applied: t.exposeBoolean('applied'),
    step: t.field({ type: RunStepRef, resolve: (r) => r.step }),
  }),
})

BackfillResultRef.implement({
  description:
    'created: runs made by this call; existing: occurrences that already had a run (counted, never doubled); runs: every run of the range, oldest first.',
  fields: (t) => ({
    created: t.exposeInt('created'),
    existing: t.exposeInt('existing'),
    runs: t.field({ type: [EventRunRef], resolve: (r) => r.runs }),
  }),
})
