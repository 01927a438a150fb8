/**
 * One attempt of one step: the only place a step kind's `execute` is called,
 * for every path that executes steps (a batch of held runs, a batch of one,
 * the start transaction's pure steps). What an attempt is, whoever makes it:
 * - an unknown kind fails for good (no retry will make it known);
 * - in a rehearsal, a kind with side effects is not executed: its intent is
 *   logged and the attempt completes with `{ rehearsal: true }`;
 * - otherwise `execute` runs under the step's timeout (or, for the start
 *   transaction's pure steps, the one deadline the caller's signal carries),
 *   and the runner's hard stop cuts it short;
 * - a throw is the attempt's failure, never the caller's: the attempt answers
 *   what it writes (decide.ts `failureWrite`: interrupt, retry, degrade, fail).
 *
 * The attempt writes nothing itself but its log lines, which go to the
 * caller's `lines` (written at once, or set-wise with the round or the start).
 */
import type { StepRow } from '../../../sql/eventSteps/index.ts'
import type { AnyStepKind, StepRegistry } from '../steps/registry.ts'
import { StepFailure, type StepOutcome } from '../steps/types.ts'
import type { ClaimedRun } from '../types.ts'
import { type ContextDeps, stepContext, withTimeout } from './context.ts'
import { type FailureWrite, failureWrite, type OutcomeWrite, outcomeWrite } from './decide.ts'
import type { StepWriter } from './writer.ts'

export interface AttemptDeps extends ContextDeps {
  registry: StepRegistry
  /** Aborted when a stopping runner's grace runs out. */
  hardStop: AbortSignal
}

export interface AttemptOf {
  run: ClaimedRun
  /** The step as it is while this attempt executes (attempt counted, `running`). */
  step: StepRow
  /** A timer or a cue timeout came due: the attempt is re-entered, not a new one. */
  resumed: boolean
  /** Where the attempt's log lines go. */
  lines: Pick<StepWriter, 'log'>
  /**
   * The caller's deadline, instead of a timer of the step's own: the start
   * transaction's pure steps all finish at once and share one.
   */
  deadline?: AbortSignal
}

/** What an attempt came to: its answer and what that writes, or its error and what that writes. */
export type AttemptResult =
  | { ok: true; outcome: StepOutcome; write: OutcomeWrite }
  | { ok: false; error: unknown; failure: FailureWrite }

/** Make one attempt of `a.step`. Never rejects: an error is the attempt's. */
export async function attempt(deps: AttemptDeps, a: AttemptOf): Promise<AttemptResult> {
  const { run, step, resumed, lines } = a
  try {
    const kind = deps.registry.get(step.kind)
    if (!kind) throw new StepFailure(`unknown step kind "${step.kind}"`, { retryable: false })
    let outcome: StepOutcome
    if (run.rehearsal && kind.sideEffects) {
      const definition = { title: run.definitionTitle, slug: run.definitionSlug }
      const ctx = stepContext(deps, lines, run, step, definition, resumed, a.deadline ?? deps.hardStop)
      const intent = kind.describe?.(ctx) ?? `${step.kind} ${JSON.stringify(ctx.params)}`
      await ctx.log('info', `rehearsal: would ${intent}`)
      outcome = { type: 'completed', result: { rehearsal: true } }
    } else {
      outcome = a.deadline
        ? await execute(deps, kind, a, a.deadline)
        : await withTimeout(step.timeoutMs, deps.hardStop, (signal) => execute(deps, kind, a, signal))
    }
    return { ok: true, outcome, write: outcomeWrite(outcome) }
  } catch (error) {
    return { ok: false, error, failure: failureWrite(step, error, deps.clock.now(), deps.hardStop.aborted) }
  }
}

/**
 * The one call of a kind's `execute`. A function of its own rather than a
 * closure made per attempt: under tsx (`npm start`) a function assigned to a
 * name is renamed by a helper call each time it is made, once per step of a
 * batch of thousands.
 */
function execute(
  deps: AttemptDeps,
  kind: AnyStepKind,
  a: AttemptOf,
  signal: AbortSignal,
): Promise<StepOutcome> {
  const { run } = a
  const definition = { title: run.definitionTitle, slug: run.definitionSlug }
  return kind.execute(stepContext(deps, a.lines, run, a.step, definition, a.resumed, signal))
}
