/**
 * Helpers shared by the built-in kinds: zod schemas for params, and turning zod
 * issues into {@link ParamProblem}s with JSON paths relative to the params.
 */
import type { z } from 'zod'
import { joinPath } from '../template.ts'
import { type ParamProblem, StepFailure } from './types.ts'

function pathOf(segments: readonly PropertyKey[]): string {
  let path = ''
  for (const s of segments) path = joinPath(path, typeof s === 'number' ? s : String(s))
  return path
}

/** How a value's type reads in a message: "a number", "an array", "null". */
export function describeType(value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`
}

/** One zod issue as problems (an unknown-keys issue names each key at its own path). */
function issueProblems(
  issue: z.core.$ZodIssue,
  input: unknown,
  allowedKeys?: readonly string[],
): ParamProblem[] {
  if (issue.code === 'unrecognized_keys') {
    // A schema that names its allowed keys in its own message is taken at its word.
    if (issue.message.startsWith('unknown key'))
      return issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: issue.message }))
    const allowed = allowedKeys ? ` (allowed: ${allowedKeys.join(', ')})` : ''
    return issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: `unknown key${allowed}` }))
  }
  let message = issue.message
  if (issue.code === 'invalid_type' && message.startsWith('Invalid input')) {
    let value: unknown = input
    for (const s of issue.path) value = (value as Record<PropertyKey, unknown> | undefined)?.[s]
    message =
      value === undefined
        ? `is required (${issue.expected})`
        : `must be ${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}, not ${describeType(value)}`
  }
  return [{ path: pathOf(issue.path), message }]
}

/**
 * Validate `params` with `schema` and answer every problem found. `allowedKeys`
 * is named in unknown-key messages so a typo shows its fix.
 */
export function schemaProblems(
  schema: z.ZodType,
  params: unknown,
  allowedKeys?: readonly string[],
): ParamProblem[] {
  const result = schema.safeParse(params ?? {})
  if (result.success) return []
  return result.error.issues.flatMap((issue) => issueProblems(issue, params ?? {}, allowedKeys))
}

/** Every issue of a failed zod parse as problems with JSON paths. */
export function zodProblems(issues: readonly z.core.$ZodIssue[], input?: unknown): ParamProblem[] {
  return issues.flatMap((issue) => issueProblems(issue, input ?? {}))
}

/**
 * Parse rendered params at execution time. A template can render a value the
 * publish-time check could not see (an empty prompt, say); that will not get
 * better by retrying.
 */
export function parseParams<T>(schema: z.ZodType<T>, params: unknown, kind: string): T {
  const result = schema.safeParse(params ?? {})
  if (result.success) return result.data
  const problems = result.error.issues.flatMap((issue) => issueProblems(issue, params ?? {}))
  const text = problems.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('; ')
  throw new StepFailure(`${kind}: invalid params after rendering: ${text}`, { retryable: false })
}

/** Whether a string contains a `{{placeholder}}` (its final value is known only at run time). */
export function hasPlaceholder(value: string): boolean {
  return /\{\{[^{}]*\}\}/.test(value)
}
