/**
 * The start transaction's leading pure steps (`StepKind.pure`: computation and
 * a log line), attempted before their step rows are written so that each row
 * goes in once, as its attempt left it (start.ts). Nothing here writes: it
 * answers the lines to append, the results to record and how far each plan got.
 */
import type { NewLog } from '../../sql/eventRunLogs.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import type { StepRow, StepSpec } from '../../sql/eventSteps/index.ts'
import { attempt } from './executor/attempt.ts'
import { withTimeout } from './executor/context.ts'
import type { StepWriter } from './executor/writer.ts'
import { STEP_DEFAULTS } from './program.ts'
import type { ClaimedRun, EngineDeps } from './types.ts'

/** One run's plan: its steps, how many lead with pure kinds, and how far they got. */
export interface Plan {
  run: RunRow
  /** The definition's names, for the steps' templates. */
  definition: { title: string; slug: string }
  specs: StepSpec[]
  /** Leading steps of pure kinds: inserted as completed, run in the transaction. */
  pure: number
  /** Index of the first step not completed (== specs.length when the run is finished). */
  reached: number
}

/** What the batch's pure steps came to, for the start transaction to write. */
export interface PureOutcome {
  /** The lines of the attempts that completed, and beside each the position of its step's row in the batch. */
  kept: NewLog[]
  keptAt: number[]
  /** Results to record (rare: pure kinds log rather than answer), by step row position. */
  results: { at: number; result: unknown }[]
  /** The kinds of the steps that completed, for the observer once the start commits. */
  finished: string[]
}

/**
 * Attempt every plan's leading pure steps, in plan order, setting each plan's
 * `reached` to the first step that did not complete.
 */
export async function runLeadingPure(
  deps: EngineDeps,
  plans: Plan[],
  now: Date,
  leaseUntil: Date,
): Promise<PureOutcome> {
  const finished: string[] = []
  // Rare: pure kinds log rather than answer, so a result costs its own UPDATE.
  const results: { at: number; result: unknown }[] = []
  // Pure steps finish at once (a batch of thousands takes milliseconds), so one
  // deadline covers them all, the shortest timeout among them, rather than a
  // timer per step. A batch that overruns it rolls back and is started one run
  // at a time, each under its own steps' timeouts, where the run whose step
  // hangs fails alone.
  const deadline = Math.min(
    STEP_DEFAULTS.timeoutSeconds * 1000,
    ...plans.flatMap((p) => p.specs.slice(0, p.pure).map((s) => s.timeoutMs)),
  )
  // The pure steps' lines (a failed attempt's are dropped), and beside each the
  // position of its step's row, which does not exist yet. Plain arrays.
  const kept: NewLog[] = []
  const keptAt: number[] = []
  // The pure steps are attempted before their rows are written, so that each
  // row goes in once, as its attempt left it: `completed`, or `pending` from the
  // step that did not complete on, for the advance to run with its retries. A
  // step never moves backwards. Their attempts see no step id yet (0): a pure
  // attempt touches nothing outside its run's log, so it has nothing to name it by.
  await withTimeout(deadline, deps.hardStop, async (signal) => {
    // The plans' step rows follow one another, in plan order.
    let offset = 0
    for (const plan of plans) {
      const first = offset
      offset += plan.specs.length
      for (let i = 0; i < plan.pure; i++) {
        const spec = plan.specs[i] as StepSpec
        const step = stepRowOf(spec, 0, plan.run.id, deps.owner, now, leaseUntil)
        // This attempt's lines, kept only if it completes (a plain array: one per run of a batch of thousands).
        const lines: NewLog[] = []
        const outcome = await runPure(
          deps,
          {
            async log(line) {
              lines.push(line)
            },
          },
          plan,
          step,
          signal,
        )
        if (!outcome) {
          plan.reached = i
          break
        }
        for (const line of lines) {
          kept.push(line)
          keptAt.push(first + i)
        }
        if (outcome.result !== undefined && outcome.result !== null)
          results.push({ at: first + i, result: outcome.result })
        finished.push(spec.kind)
      }
    }
  })
  return { kept, keptAt, results, finished }
}

/**
 * Run one pure step under the start's one deadline (`signal`); its log lines go
 * to `writer`. Null when the attempt did not complete (the step is then left
 * to run again with its retries, where its error is recorded), else its result.
 */
async function runPure(
  deps: EngineDeps,
  writer: Pick<StepWriter, 'log'>,
  plan: Plan,
  step: StepRow,
  signal: AbortSignal,
): Promise<{ result: unknown } | null> {
  const done = await attempt(deps, {
    run: claimedOf(plan),
    step,
    resumed: false,
    lines: writer,
    deadline: signal,
  })
  return done.ok && done.write.write === 'complete' ? { result: done.write.result } : null
}

/**
 * The plan's run as an attempt takes it, with its definition's names: the run
 * row itself, extended in place. A spread into a new object (`{ ...run, … }`,
 * 29 fields) took V8's slow path and was a quarter of the runner's CPU per
 * single-step run (21 → 27 µs, bench/startCpu.ts).
 */
function claimedOf(plan: Plan): ClaimedRun {
  const run = plan.run as ClaimedRun
  if (run.definitionTitle === undefined) {
    run.definitionTitle = plan.definition.title
    run.definitionSlug = plan.definition.slug
  }
  return run
}

function stepRowOf(
  spec: StepSpec,
  id: number,
  runId: number,
  owner: string,
  now: Date,
  leaseUntil: Date,
): StepRow {
  return {
    id,
    runId,
    seq: spec.seq,
    phaseIndex: spec.phaseIndex,
    phase: spec.phase,
    ending: spec.ending,
    kind: spec.kind,
    params: spec.params,
    maxAttempts: spec.maxAttempts,
    backoffMs: spec.backoffMs,
    timeoutMs: spec.timeoutMs,
    onError: spec.onError,
    status: 'running',
    parked: false,
    attempts: 1,
    wakeAt: null,
    claimedBy: owner,
    claimExpiresAt: leaseUntil,
    startedAt: now,
    endedAt: null,
    lastError: null,
    result: null,
    updatedAt: now,
  }
}
