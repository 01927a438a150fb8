/**
 * The contract between the runner and a step kind. Built-in kinds (`core.log`,
 * `core.wait`, `core.cue`, `core.webhook`) and custom kinds registered from code
 * implement the same interface.
 */

/** What the run looks like to a step (read-only). */
export interface StepRunInfo {
  id: number
  definitionId: number
  definitionTitle: string
  definitionSlug: string
  scope: string
  scheduledFor: Date
  timezone: string
  params: Record<string, unknown> | null
  rehearsal: boolean
  /** A rehearsal's speed (1 = real time): scale the show's timers with `showTimeAfter` (speed.ts). */
  speed?: number
}

/** What the step looks like to its handler (read-only). */
export interface StepInfo {
  id: number
  seq: number
  phase: string
  kind: string
  /** 1 on the first attempt; counts every attempt including this one. */
  attempt: number
  maxAttempts: number
  timeoutMs: number
  /** Set when the step slept or parked before and is being re-entered. */
  wakeAt: Date | null
  /** The step's first start, when it was re-entered after a sleep or park. */
  startedAt: Date | null
  /** True when this is a re-entry after a `sleep` or a timed `park` came due. */
  resumed: boolean
}

export interface StepContext<P = Record<string, unknown>> {
  run: StepRunInfo
  step: StepInfo
  /** Params after template rendering ({{run.scope}}, {{params.X}}, …). */
  params: P
  /** `${runId}-${stepId}`: the same on every attempt, so receivers can deduplicate. */
  idempotencyKey: string
  /** The runner's clock; tests inject one. */
  now(): Date
  /** Aborted when the step's timeout passes or the runner is stopping hard. */
  signal: AbortSignal
  /** Append a line to the run's log. */
  log(level: 'debug' | 'info' | 'warn' | 'error', message: string, data?: unknown): Promise<void>
  /** The webhook allow-list and similar process settings. */
  settings: StepSettings
}

export interface StepSettings {
  /** Normalised URL prefixes a webhook may call; empty = no webhooks. */
  webhookAllow: string[]
  /** Where `{{secret.NAME}}` values are read from (`SHOWRUNNER_SECRET_NAME`). @default process.env */
  secrets?: Readonly<Record<string, string | undefined>>
  /**
   * Where a cue's ladder (reminders, escalations, who answered) is kept and
   * its notifications are written. Without one a cue parks until its timeout
   * and nobody is told (a bare runner in a test).
   */
  cueLadder?: CueLadderPort
}

/** A cue as its handler sees it after rendering: what {@link CueLadderPort.sync} brings up to date. */
export interface CuePlan {
  run: StepRunInfo
  stepId: number
  prompt: string
  /** Names and `team:NAME` entries; empty = anyone who may operate. */
  assignees: string[]
  exclusive: boolean
  /** Seconds after the cue opened, ascending. */
  remindAfterSeconds: number[]
  /** Ascending by afterSeconds. */
  escalate: { afterSeconds: number; to: string }[]
  timeoutSeconds: number | undefined
  /** When the cue opened, if its ladder does not say so yet (the step's first start). */
  openedAt: Date
  /**
   * The step's first attempt, just begun (not re-entered): no ladder can be
   * there yet, so it is opened without being read first. Only a hint: a
   * ladder found there all the same is read after the opening.
   */
  firstEntry?: boolean
}

/** Where a cue's ladder stands after {@link CueLadderPort.sync}. */
export interface CueLadderState {
  /** The next rung still to come (a reminder, an escalation or the deadline), or null. */
  nextAt: Date | null
  deadlineAt: Date | null
}

export interface CueLadderPort {
  /**
   * Open the cue's ladder if it is new (sending CUE_WAITING), then apply every
   * rung due by `now` that was not applied yet (each once, whoever re-enters
   * the cue), including the deadline (CUE_TIMED_OUT).
   */
  sync(plan: CuePlan, now: Date): Promise<CueLadderState>
}

/** What a handler answers. A thrown error is a failed attempt (see {@link StepFailure}). */
export type StepOutcome =
  /** Done; `result` is stored on the step. */
  | { type: 'completed'; result?: unknown }
  /** A durable timer: come back at `until` (no lease is held meanwhile). */
  | { type: 'sleep'; until: Date }
  /** Wait for a person (resolveCue/skipStep); `until` is an optional timeout. */
  | { type: 'park'; until: Date | null }

/**
 * A failed attempt. `retryable: false` fails the step at once without spending
 * the remaining attempts (a bad URL will not get better by waiting).
 */
export class StepFailure extends Error {
  override readonly name = 'StepFailure'
  readonly retryable: boolean
  constructor(message: string, opts: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, { cause: opts.cause })
    this.retryable = opts.retryable ?? true
  }
}

/** One problem found while validating params; `path` is relative to the step's params. */
export interface ParamProblem {
  path: string
  message: string
}

export interface StepKind<P = Record<string, unknown>> {
  /** Unique name, e.g. `core.webhook` or `acme.lights`. */
  kind: string
  /**
   * True when executing the step changes the world outside showrunner. In a
   * rehearsal such a step is not executed: its intent is logged and it succeeds.
   */
  sideEffects: boolean
  /**
   * True when an attempt finishes at once and touches nothing but `ctx.log`
   * (`core.log`), or nothing but a port that writes for all of a round's
   * attempts together (`core.cue`'s ladder). The runner executes every kind's
   * steps for a batch of runs together, at most `RUNNER_PARALLELISM` at once;
   * an inline kind's take no such slot. A step of an inline kind with no side
   * effects that slept (`core.wait`) resumes with no lease of its own when
   * its time comes. @default false
   */
  inline?: boolean
  /**
   * True when an attempt is a pure computation over `ctx`: it finishes at once,
   * writes nothing but `ctx.log`, and touches no database, network or timer.
   * The runner may then run it inside the short transaction that starts its run,
   * holding that run's row lock, so the step rows (with any result), their log
   * lines and the run's new status commit together (a run made only of such steps is started and
   * finished in that one transaction). A pure kind must not read or change runs
   * itself (a pause from inside it would wait on the lock it runs under), and it
   * has no side effects. There it is attempted before its step row exists:
   * `ctx.step.id` is 0 and the idempotency key names no step. @default false
   */
  pure?: boolean
  /**
   * True when the kind resolves `{{secret.NAME}}` in its params itself, at the
   * moment it acts, and keeps every resolved value out of what it logs, throws
   * and answers (see `SecretScope`). Other kinds' params may not name secrets.
   * @default false
   */
  acceptsSecrets?: boolean
  /** Check params at publish time; answer every problem found (empty = valid). */
  validate(params: unknown): ParamProblem[]
  /** Perform one attempt. */
  execute(ctx: StepContext<P>): Promise<StepOutcome>
  /** What a rehearsal logs instead of executing (only for kinds with side effects). */
  describe?(ctx: StepContext<P>): string
}
