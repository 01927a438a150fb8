/**
 * The types the runner's modules share: what a held run looks like, what the
 * code that advances runs is given, the hooks metrics are wired to, and a
 * run's answer when its claim is given back. Their own module, so that no
 * module has to import the code that advances runs to name them.
 */
import type { Db } from '../../sql/db.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import type { Clock } from './clock.ts'
import type { SlotLane } from './executor/slots.ts'
import type { StepRegistry } from './steps/registry.ts'
import type { StepSettings } from './steps/types.ts'

/** Hooks the server wires to metrics; every one is optional. */
export interface RunnerObserver {
  stepFinished?(kind: string, outcome: 'completed' | 'retry' | 'failed' | 'sleep' | 'park' | 'skipped'): void
  /** Runs were finished or moved into another phase by the runner, the write made. */
  runsMoved?(): void
  claimConflict?(): void
  tickDuration?(ms: number): void
  /** A batch a pass handed on (flights.ts) has been advanced: its runs' steps changed since the pass ended. */
  batchAdvanced?(): void
  /** Steps were parked on a person and the write is made: the cue inbox can show them now. */
  cuesParked?(): void
  tickError?(): void
  /** How late this tick started against its schedule, in ms (0 when on time). */
  tickLag?(ms: number): void
  /** Run history retention deleted these terminal runs (counts per status). */
  runsDeleted?(byStatus: Partial<Record<string, number>>): void
}

/** A run this instance holds a claim on, with what its steps' templates need. */
export type ClaimedRun = RunRow & { definitionTitle: string; definitionSlug: string }

/** Steps a batch executes at once when its deps do not say (the runner passes RUNNER_PARALLELISM). */
export const DEFAULT_STEP_CONCURRENCY = 8

/** What the code that starts and advances held runs is given by the runner. */
export interface EngineDeps {
  db: Db
  registry: StepRegistry
  clock: Clock
  owner: string
  leaseMs: number
  settings: StepSettings
  /** Steps executed per run per claim before the run is given back. @default 25 */
  maxStepsPerClaim?: number
  /**
   * Steps a batch executes at once (its inline kinds apart, which finish at
   * once). @default {@link DEFAULT_STEP_CONCURRENCY}
   */
  stepConcurrency?: number
  /** Places shared with other batches, used instead of `stepConcurrency` (chunkedAdvance.ts). */
  stepSlots?: SlotLane
  observer?: RunnerObserver
  /** True once the runner is stopping: finish the current step, take no next one. */
  stopping: () => boolean
  /** Aborted when a stopping runner's grace runs out: in-flight steps are cut short. */
  hardStop: AbortSignal
}

/**
 * What a held run's advance came to, once per run: when it next needs the
 * runner (`wakeAt`), `stop` (release it as it is, due now), or `error`: its
 * own writes failed (the batch's others went on), so it is released to be
 * tried again after a tick, and the error is reported; or `givenBack`: its
 * claim is no longer held, nothing is left to release.
 */
export type RunAnswer =
  | { wakeAt: Date | null }
  | { stop: true }
  | { error: unknown }
  /** Already given back, due at `wakeAt`, by the write that parked its cue (executor/writer.ts). */
  | { wakeAt: Date | null; givenBack: true }
