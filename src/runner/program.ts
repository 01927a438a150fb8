/**
 * Programs: the phases and steps a version runs (docs/contract.md, "Programs"). Validated once, when
 * published, so that a run never meets a malformed program; expanded into one
 * row per step when a run starts.
 */

import { z } from 'zod'
import type { StepSpec } from '../../sql/eventSteps/index.ts'
import { STEP_ON_ERROR, type StepOnError } from '../../sql/states.ts'
import { badInput } from '../errors.ts'
import { describeType, zodProblems } from './steps/params.ts'
import type { StepRegistry } from './steps/registry.ts'
import type { ParamProblem } from './steps/types.ts'
import { publishedUrlRefusal } from './steps/webhookPublish.ts'
import { joinPath, templateProblems } from './template.ts'

export interface RetryDef {
  /** Attempts in total, the first included (1..20). @default 5 */
  attempts?: number
  /** Delay before the first retry, doubling after each (0..3600). @default 1 */
  backoffSeconds?: number
}

export interface StepDef {
  kind: string
  params?: Record<string, unknown>
  retry?: RetryDef
  /** Per-attempt limit (1..3600). @default 30 */
  timeoutSeconds?: number
  /** What a step that runs out of attempts does to the run. @default 'fail' */
  onError?: StepOnError
}

export interface Phase {
  name: string
  /** Entering this phase moves the run to `ending`; only ending phases may follow. @default false */
  ending?: boolean
  steps: StepDef[]
}

export interface Program {
  phases: Phase[]
}

/** One problem found in a program; `path` is a JSON path such as `phases[1].steps[0].params.url`. */
export interface ProgramProblem {
  path: string
  message: string
}

/** The per-step defaults: 5 attempts, 1 s backoff doubling, a 30 s timeout, fail the run. */
export const STEP_DEFAULTS = {
  attempts: 5,
  backoffSeconds: 1,
  timeoutSeconds: 30,
  onError: 'fail',
} as const satisfies {
  attempts: number
  backoffSeconds: number
  timeoutSeconds: number
  onError: StepOnError
}

export const PROGRAM_LIMITS = {
  maxSteps: 1000,
  maxPhaseName: 100,
  maxAttempts: 20,
  maxBackoffSeconds: 3600,
  maxTimeoutSeconds: 3600,
} as const

/** Problems shown in the error message; `details.problems` carries all of them. */
const MESSAGE_PROBLEMS = 25

/** A zod error function: "is required" when absent, else "must be <what>, not <what it is>". */
const expected =
  (what: string) =>
  (issue: { code?: string; input?: unknown }): string | undefined =>
    issue.code === 'invalid_type' || issue.code === 'invalid_value'
      ? issue.input === undefined
        ? 'is required'
        : `must be ${what}, not ${describeType(issue.input)}`
      : undefined

/** An object with exactly these keys: anything else is named with the keys that are allowed. */
function strictObject<T extends z.core.$ZodLooseShape>(shape: T, what: string) {
  const allowed = Object.keys(shape).join(', ')
  return z.strictObject(shape, {
    error: (issue) =>
      issue.code === 'unrecognized_keys' ? `unknown key (allowed: ${allowed})` : expected(what)(issue),
  })
}

/** A number in [min, max], with the range in every message. */
function boundedNumber(min: number, max: number, integer: boolean) {
  const range = (issue: { input?: unknown }) => `must be from ${min} to ${max}; got ${String(issue.input)}`
  const base = z.number({ error: expected('a number') })
  return (integer ? base.int({ error: `must be a whole number from ${min} to ${max}` }) : base)
    .min(min, { error: range })
    .max(max, { error: range })
}

const retrySchema = strictObject(
  {
    attempts: boundedNumber(1, PROGRAM_LIMITS.maxAttempts, true).optional(),
    backoffSeconds: boundedNumber(0, PROGRAM_LIMITS.maxBackoffSeconds, false).optional(),
  },
  'an object like {"attempts": 3, "backoffSeconds": 2}',
)

/** One step; its kind and params are checked against the registry by {@link stepKindProblems}. */
const stepSchema = strictObject(
  {
    kind: z.string({ error: expected('a non-empty string') }).min(1, 'must be a non-empty string, not empty'),
    params: z.record(z.string(), z.unknown(), { error: expected('an object') }).optional(),
    retry: retrySchema.optional(),
    timeoutSeconds: boundedNumber(1, PROGRAM_LIMITS.maxTimeoutSeconds, false).optional(),
    onError: z
      .enum(STEP_ON_ERROR, {
        error: (issue) => `must be "fail" or "degrade"; got ${JSON.stringify(issue.input)}`,
      })
      .optional(),
  },
  'an object with a "kind"',
)

const phaseSchema = strictObject(
  {
    name: z
      .string({ error: expected('a string') })
      .refine((name) => name.trim() !== '', 'must not be empty')
      .refine((name) => name.length <= PROGRAM_LIMITS.maxPhaseName, {
        error: (issue) =>
          `must be at most ${PROGRAM_LIMITS.maxPhaseName} characters; got ${String(issue.input).length}`,
      }),
    ending: z.boolean({ error: expected('true or false') }).optional(),
    steps: z.array(stepSchema, { error: expected('an array') }).min(1, 'must not be empty'),
  },
  'an object with "name" and "steps"',
)

/** The shape of a program (the cross checks of {@link programProblems} come on top). */
export const programSchema = strictObject(
  { phases: z.array(phaseSchema, { error: expected('an array') }).min(1, 'must not be empty') },
  'an object like {"phases": [...]}',
)

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** A path relative to `base` (kinds answer `url`, `headers.X-Y`, `[0]` or ''). */
function under(base: string, relative: string): string {
  if (relative === '') return base
  return relative.startsWith('[') ? `${base}${relative}` : `${base}.${relative}`
}

/**
 * What the shape cannot say: the kind must be registered and accept its params,
 * placeholders must be known, phase names unique, only ending phases may follow
 * an ending one, and the whole program is bounded. Read from the raw input, so
 * these are reported beside the shape's problems, not instead of them.
 */
function crossProblems(input: Record<string, unknown>, registry: StepRegistry): ProgramProblem[] {
  const problems: ProgramProblem[] = []
  if (!Array.isArray(input.phases)) return problems
  const names = new Map<string, number>()
  let firstEnding: { index: number; name: string } | null = null
  let totalSteps = 0
  input.phases.forEach((phase: unknown, i) => {
    if (!isObject(phase)) return
    const path = joinPath('phases', i)
    const { name, ending } = phase
    if (typeof name === 'string' && name.trim() !== '' && name.length <= PROGRAM_LIMITS.maxPhaseName) {
      const first = names.get(name)
      if (first !== undefined)
        problems.push({
          path: joinPath(path, 'name'),
          message: `duplicates the name of phases[${first}] (${JSON.stringify(name)})`,
        })
      else names.set(name, i)
    }
    if (ending === true) firstEnding ??= { index: i, name: typeof name === 'string' ? name : '' }
    else if (firstEnding !== null && (ending === undefined || ending === false))
      problems.push({
        path,
        message: `must be an ending phase: it follows the ending phase phases[${firstEnding.index}] (${JSON.stringify(firstEnding.name)}), and only ending phases may follow one`,
      })
    if (!Array.isArray(phase.steps)) return
    totalSteps += phase.steps.length
    phase.steps.forEach((step: unknown, j) => {
      if (isObject(step))
        problems.push(...stepKindProblems(step, joinPath(joinPath(path, 'steps'), j), registry))
    })
  })
  if (totalSteps > PROGRAM_LIMITS.maxSteps)
    problems.push({
      path: 'phases',
      message: `has ${totalSteps} steps in total; at most ${PROGRAM_LIMITS.maxSteps} are allowed`,
    })
  return problems
}

function stepKindProblems(
  step: Record<string, unknown>,
  path: string,
  registry: StepRegistry,
): ProgramProblem[] {
  const problems: ProgramProblem[] = []
  const paramsPath = joinPath(path, 'params')
  const params = step.params
  if (typeof step.kind === 'string' && step.kind !== '') {
    const kind = registry.get(step.kind)
    if (!kind) {
      problems.push({
        path: joinPath(path, 'kind'),
        message: `unknown step kind ${JSON.stringify(step.kind)} (known: ${registry.kinds().join(', ')})`,
      })
    } else if (params === undefined || isObject(params)) {
      let found: ParamProblem[]
      try {
        found = kind.validate(params ?? {})
      } catch (err) {
        found = [
          {
            path: '',
            message: `could not be validated: ${err instanceof Error ? err.message : String(err)}`,
          },
        ]
      }
      for (const p of found) problems.push({ path: under(paramsPath, p.path), message: p.message })
    }
  }
  if (isObject(params)) {
    const secrets = typeof step.kind === 'string' && registry.get(step.kind)?.acceptsSecrets === true
    problems.push(...templateProblems(params, paramsPath, { secrets }))
  }
  return problems
}

/** The keys of each level in the order a person reads them; unknown keys are named first. */
const KEY_ORDER: Record<string, readonly string[]> = {
  '': ['phases'],
  phases: ['name', 'ending', 'steps'],
  steps: ['kind', 'params', 'retry', 'timeoutSeconds', 'onError'],
  retry: ['attempts', 'backoffSeconds'],
}

function pathSegments(path: string): (string | number)[] {
  return [...path.matchAll(/\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]|([^.[\]]+)/g)].map((m) =>
    m[1] !== undefined ? Number(m[1]) : (m[2] ?? m[3] ?? ''),
  )
}

/**
 * Problems sorted as the program reads: phase by phase, step by step, a
 * level's unknown keys first, and a problem of a whole object after those of
 * its parts (the shape checker and the cross checks each find them in their
 * own order). Params keep the order their kind answered.
 */
function inDocumentOrder(problems: ProgramProblem[]): ProgramProblem[] {
  const keyed = problems.map((problem, index) => ({ problem, index, at: pathSegments(problem.path) }))
  const rank = (parent: string | number | undefined, key: string): number => {
    const order = typeof parent === 'number' || parent === undefined ? undefined : KEY_ORDER[parent]
    return order ? order.indexOf(key) : 0
  }
  keyed.sort((a, b) => {
    for (let i = 0; i < Math.min(a.at.length, b.at.length); i++) {
      const x = a.at[i] as string | number
      const y = b.at[i] as string | number
      if (x === y) continue
      if (typeof x === 'number' && typeof y === 'number') return x - y
      // A key's level is named by the key above it, or by the list it stands in (phases[1] → a phase's keys).
      const above = a.at[i - 1]
      const parent = i === 0 ? '' : typeof above === 'number' ? a.at[i - 2] : above
      return rank(parent, String(x)) - rank(parent, String(y)) || a.index - b.index
    }
    return b.at.length - a.at.length || a.index - b.index
  })
  return keyed.map((k) => k.problem)
}

/**
 * What publishing checks beyond the program itself. `webhookAllow`: the
 * instance's WEBHOOK_ALLOW prefixes; given, a `core.webhook` URL no entry can
 * allow is a problem at publish (see steps/webhookPublish.ts). Left out (the
 * CLI's local checks, which do not know the server's list), it is not checked.
 */
export interface PublishChecks {
  webhookAllow?: readonly string[]
}

/** The `core.webhook` URLs the allow-list refuses, each at its `params.url` path. */
function webhookProblems(input: Record<string, unknown>, allow: readonly string[]): ProgramProblem[] {
  const problems: ProgramProblem[] = []
  if (!Array.isArray(input.phases)) return problems
  input.phases.forEach((phase: unknown, i) => {
    if (!isObject(phase) || !Array.isArray(phase.steps)) return
    phase.steps.forEach((step: unknown, j) => {
      if (!isObject(step) || step.kind !== 'core.webhook' || !isObject(step.params)) return
      const url = step.params.url
      if (typeof url !== 'string') return // the kind's own check names it
      const refusal = publishedUrlRefusal(url, allow)
      if (refusal) problems.push({ path: `phases[${i}].steps[${j}].params.url`, message: refusal })
    })
  })
  return problems
}

/**
 * Every problem in a program, each with its JSON path (empty = valid). A JSON
 * text is parsed first, for clients that send the program as a string.
 */
export function programProblems(
  json: unknown,
  registry: StepRegistry,
  checks: PublishChecks = {},
): ProgramProblem[] {
  return check(json, registry, checks).problems
}

function check(
  json: unknown,
  registry: StepRegistry,
  checks: PublishChecks,
): { program: Program | null; problems: ProgramProblem[] } {
  let input = json
  if (typeof input === 'string') {
    try {
      input = JSON.parse(input)
    } catch {
      return { program: null, problems: [{ path: '', message: 'is a string that is not valid JSON' }] }
    }
  }
  const shape = programSchema.safeParse(input)
  const problems = shape.success ? [] : zodProblems(shape.error.issues)
  if (isObject(input)) problems.push(...crossProblems(input, registry))
  if (isObject(input) && checks.webhookAllow) problems.push(...webhookProblems(input, checks.webhookAllow))
  if (!shape.success || problems.length > 0) return { program: null, problems: inDocumentOrder(problems) }
  return { program: shape.data as Program, problems }
}

/**
 * Validate a program as published and answer it in canonical form (known keys
 * only; params as given).
 * @throws AppError BAD_USER_INPUT listing every problem with its JSON path, in
 * the message and as `details.problems`.
 */
export function validateProgram(json: unknown, registry: StepRegistry, checks: PublishChecks = {}): Program {
  const { program, problems } = check(json, registry, checks)
  if (program && problems.length === 0) return program
  const shown = problems
    .slice(0, MESSAGE_PROBLEMS)
    .map((p) => `${p.path === '' ? 'program' : p.path}: ${p.message}`)
  if (problems.length > MESSAGE_PROBLEMS) shown.push(`… and ${problems.length - MESSAGE_PROBLEMS} more`)
  throw badInput(`Invalid program: ${shown.join('; ')}`, { problems })
}

/** One spec per step, in run order, with the per-step defaults filled in. */
export function expandProgram(program: Program): StepSpec[] {
  const specs: StepSpec[] = []
  program.phases.forEach((phase, phaseIndex) => {
    for (const step of phase.steps) {
      specs.push({
        seq: specs.length,
        phaseIndex,
        phase: phase.name,
        ending: phase.ending === true,
        kind: step.kind,
        params: step.params ?? {},
        maxAttempts: step.retry?.attempts ?? STEP_DEFAULTS.attempts,
        backoffMs: Math.round((step.retry?.backoffSeconds ?? STEP_DEFAULTS.backoffSeconds) * 1000),
        timeoutMs: Math.round((step.timeoutSeconds ?? STEP_DEFAULTS.timeoutSeconds) * 1000),
        onError: step.onError ?? STEP_DEFAULTS.onError,
      })
    }
  })
  return specs
}
