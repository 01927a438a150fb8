/**
 * Programs: the phases and steps a version runs (SPEC §4). Validated once, when
 * published, so that a run never meets a malformed program; expanded into one
 * row per step when a run starts.
 */

import type { StepSpec } from '../../sql/eventSteps.ts'
import { STEP_ON_ERROR, type StepOnError } from '../../sql/states.ts'
import { badInput } from '../errors.ts'
import type { StepRegistry } from './steps/registry.ts'
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

/** The per-step defaults of SPEC §4. */
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

const PROGRAM_KEYS = ['phases']
const PHASE_KEYS = ['name', 'ending', 'steps']
const STEP_KEYS = ['kind', 'params', 'retry', 'timeoutSeconds', 'onError']
const RETRY_KEYS = ['attempts', 'backoffSeconds']

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function typeName(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`
}

/** A path relative to `base` (kinds answer `url`, `headers.X-Y`, `[0]` or ''). */
function under(base: string, relative: string): string {
  if (relative === '') return base
  return relative.startsWith('[') ? `${base}${relative}` : `${base}.${relative}`
}

class Problems {
  readonly list: ProgramProblem[] = []
  add(path: string, message: string): void {
    this.list.push({ path, message })
  }
  unknownKeys(obj: Record<string, unknown>, allowed: string[], path: string): void {
    for (const key of Object.keys(obj)) {
      if (!allowed.includes(key))
        this.add(joinPath(path, key), `unknown key (allowed: ${allowed.join(', ')})`)
    }
  }
  /** Check an optional number; answers it when valid. */
  number(
    obj: Record<string, unknown>,
    key: string,
    path: string,
    min: number,
    max: number,
    integer: boolean,
  ): number | undefined {
    const v = obj[key]
    if (v === undefined) return undefined
    const at = joinPath(path, key)
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      this.add(at, `must be a number, not ${typeName(v)}`)
    } else if (integer && !Number.isInteger(v)) {
      this.add(at, `must be a whole number from ${min} to ${max}`)
    } else if (v < min || v > max) {
      this.add(at, `must be from ${min} to ${max}; got ${v}`)
    } else {
      return v
    }
    return undefined
  }
}

function checkStep(raw: unknown, path: string, registry: StepRegistry, problems: Problems): StepDef | null {
  if (!isObject(raw)) {
    problems.add(path, `must be an object with a "kind", not ${typeName(raw)}`)
    return null
  }
  problems.unknownKeys(raw, STEP_KEYS, path)
  let ok = true

  let params: Record<string, unknown> | undefined
  const paramsPath = joinPath(path, 'params')
  if (raw.params !== undefined) {
    if (isObject(raw.params)) params = raw.params
    else {
      problems.add(paramsPath, `must be an object, not ${typeName(raw.params)}`)
      ok = false
    }
  }

  const kindPath = joinPath(path, 'kind')
  const kindName = raw.kind
  if (typeof kindName !== 'string' || kindName === '') {
    problems.add(
      kindPath,
      kindName === undefined ? 'is required' : `must be a non-empty string, not ${typeName(kindName)}`,
    )
    ok = false
  } else {
    const kind = registry.get(kindName)
    if (!kind) {
      problems.add(
        kindPath,
        `unknown step kind ${JSON.stringify(kindName)} (known: ${registry.kinds().join(', ')})`,
      )
      ok = false
    } else if (raw.params === undefined || params) {
      let found: { path: string; message: string }[]
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
      for (const p of found) problems.add(under(paramsPath, p.path), p.message)
      if (found.length > 0) ok = false
    }
  }
  if (params) {
    const secrets = typeof kindName === 'string' && registry.get(kindName)?.acceptsSecrets === true
    const found = templateProblems(params, paramsPath, { secrets })
    for (const p of found) problems.add(p.path, p.message)
    if (found.length > 0) ok = false
  }

  let retry: RetryDef | undefined
  if (raw.retry !== undefined) {
    const retryPath = joinPath(path, 'retry')
    if (!isObject(raw.retry)) {
      problems.add(
        retryPath,
        `must be an object like {"attempts": 3, "backoffSeconds": 2}, not ${typeName(raw.retry)}`,
      )
      ok = false
    } else {
      problems.unknownKeys(raw.retry, RETRY_KEYS, retryPath)
      const before = problems.list.length
      const attempts = problems.number(raw.retry, 'attempts', retryPath, 1, PROGRAM_LIMITS.maxAttempts, true)
      const backoffSeconds = problems.number(
        raw.retry,
        'backoffSeconds',
        retryPath,
        0,
        PROGRAM_LIMITS.maxBackoffSeconds,
        false,
      )
      if (problems.list.length > before) ok = false
      retry = {
        ...(attempts !== undefined && { attempts }),
        ...(backoffSeconds !== undefined && { backoffSeconds }),
      }
    }
  }

  const before = problems.list.length
  const timeoutSeconds = problems.number(
    raw,
    'timeoutSeconds',
    path,
    1,
    PROGRAM_LIMITS.maxTimeoutSeconds,
    false,
  )
  if (problems.list.length > before) ok = false

  let onError: StepOnError | undefined
  if (raw.onError !== undefined) {
    if ((STEP_ON_ERROR as readonly unknown[]).includes(raw.onError)) onError = raw.onError as StepOnError
    else {
      problems.add(
        joinPath(path, 'onError'),
        `must be "fail" or "degrade"; got ${JSON.stringify(raw.onError)}`,
      )
      ok = false
    }
  }

  if (!ok || typeof kindName !== 'string') return null
  return {
    kind: kindName,
    ...(params !== undefined && { params }),
    ...(retry !== undefined && { retry }),
    ...(timeoutSeconds !== undefined && { timeoutSeconds }),
    ...(onError !== undefined && { onError }),
  }
}

/**
 * Every problem in a program, each with its JSON path (empty = valid). A JSON
 * text is parsed first, for clients that send the program as a string.
 */
export function programProblems(json: unknown, registry: StepRegistry): ProgramProblem[] {
  return check(json, registry).problems
}

function check(
  json: unknown,
  registry: StepRegistry,
): { program: Program | null; problems: ProgramProblem[] } {
  const problems = new Problems()
  let input = json
  if (typeof input === 'string') {
    try {
      input = JSON.parse(input)
    } catch {
      problems.add('', 'is a string that is not valid JSON')
      return { program: null, problems: problems.list }
    }
  }
  if (!isObject(input)) {
    problems.add('', `must be an object like {"phases": [...]}, not ${typeName(input)}`)
    return { program: null, problems: problems.list }
  }
  problems.unknownKeys(input, PROGRAM_KEYS, '')
  const rawPhases = input.phases
  if (!Array.isArray(rawPhases)) {
    problems.add(
      'phases',
      rawPhases === undefined ? 'is required' : `must be an array, not ${typeName(rawPhases)}`,
    )
    return { program: null, problems: problems.list }
  }
  if (rawPhases.length === 0) problems.add('phases', 'must not be empty')

  const phases: Phase[] = []
  const names = new Map<string, number>()
  let firstEnding: { index: number; name: string } | null = null
  let totalSteps = 0
  let ok = true

  rawPhases.forEach((raw: unknown, i) => {
    const path = joinPath('phases', i)
    if (!isObject(raw)) {
      problems.add(path, `must be an object with "name" and "steps", not ${typeName(raw)}`)
      ok = false
      return
    }
    problems.unknownKeys(raw, PHASE_KEYS, path)
    const start = problems.list.length

    const name = raw.name
    const namePath = joinPath(path, 'name')
    if (typeof name !== 'string') {
      problems.add(namePath, name === undefined ? 'is required' : `must be a string, not ${typeName(name)}`)
    } else if (name.trim() === '') {
      problems.add(namePath, 'must not be empty')
    } else if (name.length > PROGRAM_LIMITS.maxPhaseName) {
      problems.add(namePath, `must be at most ${PROGRAM_LIMITS.maxPhaseName} characters; got ${name.length}`)
    } else if (names.has(name)) {
      problems.add(namePath, `duplicates the name of phases[${names.get(name)}] (${JSON.stringify(name)})`)
    } else {
      names.set(name, i)
    }

    let ending = false
    if (raw.ending !== undefined) {
      if (typeof raw.ending !== 'boolean') {
        problems.add(joinPath(path, 'ending'), `must be true or false, not ${typeName(raw.ending)}`)
      } else {
        ending = raw.ending
      }
    }
    if (ending) {
      firstEnding ??= { index: i, name: typeof name === 'string' ? name : '' }
    } else if (firstEnding !== null && (raw.ending === undefined || typeof raw.ending === 'boolean')) {
      problems.add(
        path,
        `must be an ending phase: it follows the ending phase phases[${firstEnding.index}] (${JSON.stringify(firstEnding.name)}), and only ending phases may follow one`,
      )
    }

    const stepsPath = joinPath(path, 'steps')
    const steps: StepDef[] = []
    if (!Array.isArray(raw.steps)) {
      problems.add(
        stepsPath,
        raw.steps === undefined ? 'is required' : `must be an array, not ${typeName(raw.steps)}`,
      )
    } else if (raw.steps.length === 0) {
      problems.add(stepsPath, 'must not be empty')
    } else {
      totalSteps += raw.steps.length
      raw.steps.forEach((rawStep: unknown, j) => {
        const step = checkStep(rawStep, joinPath(stepsPath, j), registry, problems)
        if (step) steps.push(step)
      })
    }
    if (problems.list.length > start) ok = false
    if (typeof name === 'string') phases.push({ name, ...(raw.ending !== undefined && { ending }), steps })
  })

  if (totalSteps > PROGRAM_LIMITS.maxSteps) {
    problems.add('phases', `has ${totalSteps} steps in total; at most ${PROGRAM_LIMITS.maxSteps} are allowed`)
  }
  const valid = ok && problems.list.length === 0
  return { program: valid ? { phases } : null, problems: problems.list }
}

/**
 * Validate a program as published and answer it in canonical form (known keys
 * only; params as given).
 * @throws AppError BAD_USER_INPUT listing every problem with its JSON path, in
 * the message and as `details.problems`.
 */
export function validateProgram(json: unknown, registry: StepRegistry): Program {
  const { program, problems } = check(json, registry)
  if (program && problems.length === 0) return program
  const shown = problems
    .slice(0, MESSAGE_PROBLEMS)
    .map((p) => `${p.path === '' ? 'program' : p.path}: ${p.message}`)
  if (problems.length > MESSAGE_PROBLEMS) shown.push(`… and ${problems.length - MESSAGE_PROBLEMS} more`)
  throw badInput(`Invalid program: ${shown.join('; ')}`, { problems })
}

/** One spec per step, in run order, with the SPEC §4 defaults filled in. */
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
