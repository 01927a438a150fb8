/**
 * How many bytes an answer may weigh, judged twice:
 *
 * - **Before it runs**, from the document ({@link estimateFieldBytes}, used by
 *   the query budget's walk): every object and scalar costs a few dozen bytes,
 *   and the fields that can be large count at their bound (a run's `params`
 *   at MAX_PARAMS_BYTES, a step's `result` at its 2 KiB cut) or, where only
 *   a whole is bounded, at a generous estimate (a version's `program`, a
 *   step's `params`). An operation whose estimate passes
 *   MAX_ANSWER_BYTES is refused before any resolver runs, so no statement
 *   fetches what could not be sent.
 * - **Before it is serialised**, from the data ({@link useAnswerSizeCap}): the
 *   result is measured, stopping as soon as the cap is passed, and replaced by
 *   one error when it is over. The estimate cannot know every value (a step's
 *   params are bounded only by their program as a whole, a row stored before
 *   MAX_PARAMS_BYTES existed may be larger), so this is the hard cap: no answer
 *   bigger than MAX_ANSWER_BYTES is ever turned into a string.
 *
 * Both answer `extensions.code` ANSWER_TOO_LARGE with a message naming the
 * variable.
 */
import type { ExecutionResult, GraphQLError } from 'graphql'
import type { Plugin } from 'graphql-yoga'
import { RESPONSE_BODY_BYTES } from '../runner/steps/webhook.ts'
import { API_CODES, refusalWithHttp } from './errors.ts'

/** What an object's braces, a scalar or a field's key and punctuation weigh in the estimate. */
export const OBJECT_BYTES = 2
export const SCALAR_BYTES = 40
/** A step's params as an estimate only: a program's steps share one bound (MAX_BODY_BYTES) between them. */
export const STEP_PARAMS_BYTES = 256
/**
 * A version's program as an estimate only: one may weigh MAX_BODY_BYTES, but a
 * definition's versions (counted as 10) are rarely all that large, and the
 * console's definition page asks for every one of them.
 */
export const PROGRAM_BYTES = 128 * 1024
export const SCHEMA_INTROSPECTION_BYTES = 512 * 1024
export const TYPE_INTROSPECTION_BYTES = 32 * 1024

export interface AnswerBounds {
  /** MAX_ANSWER_BYTES. */
  maxAnswerBytes: number
  /** MAX_PARAMS_BYTES: the most a run's params weigh. */
  maxParamsBytes: number
  /** MAX_BODY_BYTES: the most a published program weighs. */
  maxProgramBytes: number
}

/** The estimate for one leaf field (key included), `Type.field` as the schema names it. */
export function estimateFieldBytes(coordinate: string, responseName: string, bounds: AnswerBounds): number {
  const key = responseName.length + 4
  switch (coordinate) {
    case 'EventRun.params':
      return key + bounds.maxParamsBytes
    case 'EventVersion.program':
      return key + Math.min(PROGRAM_BYTES, bounds.maxProgramBytes)
    case 'RunStep.params':
      return key + STEP_PARAMS_BYTES
    case 'RunStep.result':
      // The status, the body cut to 2 KiB, and its JSON escapes.
      return key + 2 * RESPONSE_BODY_BYTES
    default:
      return key + SCALAR_BYTES
  }
}

function tooLarge(message: string, status?: number): GraphQLError {
  return refusalWithHttp(message, API_CODES.ANSWER_TOO_LARGE, status ? { status } : undefined)
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`

/** The refusal of an operation whose estimate is over the cap (before it runs). */
export function estimateRefusal(
  estimate: number,
  max: number,
  asSent: string,
  status?: number,
): GraphQLError {
  return tooLarge(
    `Answer size limit: this operation could answer about ${mb(estimate)}${asSent}; at most ${mb(max)} (MAX_ANSWER_BYTES). Ask for fewer items, or leave out large fields (params, result, program) from long lists.`,
    status,
  )
}

/**
 * The JSON size of `value`, counted until it passes `max`: answers a number
 * over `max` as soon as it is known to be, without walking the rest. Strings
 * count their UTF-16 length plus quotes; escapes are not counted (the cap is a
 * bound on memory, and a string's escapes at most multiply it by 6 for control
 * characters, which no field here stores in bulk).
 */
export function jsonSizeUpTo(value: unknown, max: number): number {
  let size = 0
  const stack: unknown[] = [value]
  while (stack.length > 0) {
    const v = stack.pop()
    if (typeof v === 'string') size += v.length + 2
    else if (v === null || v === undefined) size += 4
    else if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') size += 8
    else if (v instanceof Date) size += 26
    else if (Array.isArray(v)) {
      size += 1 + v.length
      for (const item of v) stack.push(item)
    } else if (typeof v === 'object') {
      size += 1
      for (const [key, item] of Object.entries(v as Record<string, unknown>)) {
        size += key.length + 4
        stack.push(item)
      }
    }
    if (size > max) return size
  }
  return size
}

function capped(result: ExecutionResult, max: number): ExecutionResult | null {
  if (result.data === null || result.data === undefined) return null
  const size = jsonSizeUpTo(result.data, max)
  if (size <= max) return null
  return {
    errors: [
      tooLarge(
        `Answer size limit: this answer is over ${mb(max)} (MAX_ANSWER_BYTES) and was not sent. Ask for fewer items, or leave out large fields (params, result, program) from long lists.`,
      ),
    ],
  }
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value
}

/** Results measured by {@link useAnswerSizeCap}, and those measured before for another subscriber (for tests). */
export const answerSizeChecks = { measured: 0, reused: 0 }

/**
 * The hard cap: every result (HTTP, SSE and WebSocket; each subscription
 * event) measured before serialisation. A subscription event's result is
 * one object for every subscriber it is shared with (sharedSubscribe.ts), so
 * it is measured once: forty dashboards cost one walk of a change, not forty.
 */
export function useAnswerSizeCap(maxAnswerBytes: number): Plugin {
  const measured = new WeakMap<ExecutionResult, ExecutionResult | null>()
  const onResult = ({
    result,
    setResult,
  }: {
    result: ExecutionResult
    setResult: (r: ExecutionResult) => void
  }) => {
    let replaced = measured.get(result)
    if (replaced === undefined) {
      answerSizeChecks.measured++
      replaced = capped(result, maxAnswerBytes)
      measured.set(result, replaced)
    } else answerSizeChecks.reused++
    if (replaced) setResult(replaced)
  }
  return {
    onExecute() {
      return {
        onExecuteDone({ result, setResult }) {
          if (isAsyncIterable(result)) return { onNext: onResult }
          onResult({ result: result as ExecutionResult, setResult })
          return undefined
        },
      }
    },
    onSubscribe() {
      return {
        onSubscribeResult({ result }) {
          if (isAsyncIterable(result)) return { onNext: onResult }
          return undefined
        },
      }
    },
  }
}
