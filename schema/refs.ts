/**
 * Object type references, declared in one place so the entity files can point
 * at each other (a run has steps, a step has its run) without import cycles.
 * Each entity file implements its ref.
 */
import type { DefinitionRow } from '../sql/eventDefinitions.ts'
import type { LogRow } from '../sql/eventRunLogs.ts'
import type { RunListRow, RunStatusSnapshot } from '../sql/eventRuns/index.ts'
import type { StepRow } from '../sql/eventSteps/index.ts'
import type { VersionRow } from '../sql/eventVersions.ts'
import type { HeartbeatRow } from '../sql/runnerHeartbeats.ts'
import { builder } from './builder.ts'

/** What the `health` root field answers. */
export interface HealthShape {
  ok: boolean
  database: boolean
  runners: HeartbeatRow[]
  /** Counts keyed by UPPERCASE status. */
  runsByStatus: Record<string, number>
  degradedRuns: number
  waitingSteps: number
  oldestWaitingStepAt: Date | null
}

export interface TransitionResultShape {
  applied: boolean
  run: RunListRow
}

export interface StepResultShape {
  applied: boolean
  step: StepRow
}

export interface BackfillResultShape {
  created: number
  existing: number
  runs: RunListRow[]
}

/** One event of `waitingStepChanges` (src/api/inboxChanges.ts). */
export interface WaitingStepsChangeShape {
  reset: boolean
  added: StepRow[]
  removed: string[]
}

export const EventRunRef = builder.objectRef<RunListRow>('EventRun')
export const RunStepRef = builder.objectRef<StepRow>('RunStep')
export const RunLogRef = builder.objectRef<LogRow>('RunLog')
export const EventDefinitionRef = builder.objectRef<DefinitionRow>('EventDefinition')
export const EventVersionRef = builder.objectRef<VersionRow>('EventVersion')
export const RunStatusEventRef = builder.objectRef<RunStatusSnapshot>('RunStatusEvent')
export const HealthRef = builder.objectRef<HealthShape>('Health')
export const RunnerInstanceRef = builder.objectRef<HeartbeatRow>('RunnerInstance')
export const TransitionResultRef = builder.objectRef<TransitionResultShape>('TransitionResult')
export const StepResultRef = builder.objectRef<StepResultShape>('StepResult')
export const BackfillResultRef = builder.objectRef<BackfillResultShape>('BackfillResult')
export const WaitingStepsChangeRef = builder.objectRef<WaitingStepsChangeShape>('WaitingStepsChange')
