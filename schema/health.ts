/** `Health` and `RunnerInstance`. */
import { HealthRef, RunnerInstanceRef } from './refs.ts'

HealthRef.implement({
  description: 'Whether the system is driving runs, and what is waiting on people.',
  fields: (t) => ({
    ok: t.exposeBoolean('ok', {
      description: 'The database answers and at least one runner instance ticked recently.',
    }),
    database: t.exposeBoolean('database'),
    runners: t.field({
      type: [RunnerInstanceRef],
      description: 'Runner instances that ticked recently (within max(30 s, 5 ticks)).',
      resolve: (h) => h.runners,
    }),
    runsByStatus: t.expose('runsByStatus', {
      type: 'JSON',
      description: 'Run counts keyed by UPPERCASE status, every status present.',
    }),
    degradedRuns: t.exposeInt('degradedRuns', {
      description: 'Runs not yet finished whose health is DEGRADED.',
    }),
    waitingSteps: t.exposeInt('waitingSteps', { description: 'Steps parked on a person, across all runs.' }),
    oldestWaitingStepAt: t.expose('oldestWaitingStepAt', {
      type: 'DateTime',
      nullable: true,
      description: 'When the longest-waiting parked step started waiting.',
    }),
  }),
})

RunnerInstanceRef.implement({
  description: 'A process running the tick loop.',
  fields: (t) => ({
    id: t.exposeString('instanceId'),
    host: t.exposeString('host'),
    startedAt: t.expose('startedAt', { type: 'DateTime' }),
    lastTickAt: t.expose('lastTickAt', { type: 'DateTime' }),
    tickLagMs: t.exposeInt('tickLagMs', { description: 'How late its last tick started, in milliseconds.' }),
  }),
})
