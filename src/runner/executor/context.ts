/**
 * The one place a step's {@link StepContext} is built (by attempt.ts). Its
 * `log` goes where the attempt's caller says: collected and written set-wise
 * with a round or the start transaction, or at once by a straggler.
 */
import type { NewLog } from '../../../sql/eventRunLogs.ts'
import type { RunRow } from '../../../sql/eventRuns/index.ts'
import type { StepRow } from '../../../sql/eventSteps/index.ts'
import type { Clock } from '../clock.ts'
import { cuePrompt } from '../steps/paramText.ts'
import { type StepContext, StepFailure, type StepSettings } from '../steps/types.ts'
import { renderTemplate, type TemplateVars } from '../template.ts'
import type { ClaimedRun } from '../types.ts'
import type { StepWriter } from './writer.ts'

export interface ContextDeps {
  clock: Clock
  owner: string
  settings: StepSettings
}

/** The run's definition, as its steps' templates name it. */
export interface DefinitionNames {
  title: string
  slug: string
}

/** What `{{…}}` in a step's params (or a cue's prompt) may name, for this run. */
export function templateVars(run: RunRow, definition: DefinitionNames): TemplateVars {
  return {
    run: { id: run.id, scope: run.scope, scheduledFor: run.scheduledFor },
    params: run.params,
    definition: { title: definition.title, slug: definition.slug },
  }
}

export function stepContext(
  deps: ContextDeps,
  writer: Pick<StepWriter, 'log'>,
  run: RunRow,
  step: StepRow,
  definition: DefinitionNames,
  resumed: boolean,
  signal: AbortSignal,
): StepContext {
  const vars = templateVars(run, definition)
  return {
    run: {
      id: run.id,
      definitionId: run.definitionId,
      definitionTitle: definition.title,
      definitionSlug: definition.slug,
      scope: run.scope,
      scheduledFor: run.scheduledFor,
      timezone: run.timezone,
      params: run.params,
      rehearsal: run.rehearsal,
      speed: run.speed,
    },
    step: {
      id: step.id,
      seq: step.seq,
      phase: step.phase,
      kind: step.kind,
      attempt: step.attempts,
      maxAttempts: step.maxAttempts,
      timeoutMs: step.timeoutMs,
      wakeAt: step.wakeAt,
      startedAt: step.startedAt,
      resumed,
    },
    params: (renderTemplate(step.params ?? {}, vars) ?? {}) as Record<string, unknown>,
    idempotencyKey: `${run.id}-${step.id}`,
    // Methods rather than arrow properties: under tsx (`npm start`) every arrow
    // written as a property is renamed by a helper call each time the object is
    // built, which was 7% of the runner's CPU in a 20,000-run start. Neither
    // uses `this`, so a step kind may still take them off the context.
    now() {
      return deps.clock.now()
    },
    signal,
    settings: deps.settings,
    log(level, message, data) {
      return writer.log({ runId: run.id, stepId: step.id, level, message, data, actor: deps.owner })
    },
  }
}

/**
 * Run `fn` with a step's timeout: the signal aborts and the promise rejects at
 * the deadline, or when the runner's stop grace runs out (`hardStop`). A step
 * that only gets its place in a round after the grace ran out is not begun at
 * all: an abort listener added to a signal already aborted never fires, so
 * without the check it would run to the end, webhook and all, after the stop.
 */
export async function withTimeout<T>(
  timeoutMs: number,
  hardStop: AbortSignal,
  fn: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  if (hardStop.aborted) throw shuttingDown()
  const controller = new AbortController()
  const onHardStop = () => controller.abort(shuttingDown())
  hardStop.addEventListener('abort', onHardStop, { once: true })
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new StepFailure(`timed out after ${timeoutMs} ms`)
      controller.abort(err)
      reject(err)
    }, timeoutMs)
  })
  const aborted = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true })
  })
  try {
    return await Promise.race([fn(controller.signal), deadline, aborted])
  } finally {
    clearTimeout(timer)
    hardStop.removeEventListener('abort', onHardStop)
  }
}

function shuttingDown(): StepFailure {
  return new StepFailure('the runner is shutting down')
}

/** The log line a run gets when a step parks it on a person, its prompt rendered as the step saw it. */
export function parkedLine(run: ClaimedRun, step: Pick<StepRow, 'id' | 'params'>): NewLog {
  const raw = cuePrompt(step.params)
  const vars = templateVars(run, { title: run.definitionTitle, slug: run.definitionSlug })
  const prompt = raw !== null ? `: ${String(renderTemplate(raw, vars))}` : ''
  return { runId: run.id, stepId: step.id, level: 'info', message: `waiting on a person${prompt}` }
}
