/**
 * What clients see when something goes wrong. One rule, applied to HTTP, SSE
 * and WebSocket alike (yoga's masked-errors plugin runs inside `getEnveloped`,
 * which the WebSocket server uses too):
 * - an AppError → its message and `extensions.code`;
 * - a database that cannot be reached → DATABASE_UNAVAILABLE, "The database is
 *   unavailable; retry shortly.";
 * - a full wait queue on the API's pool → BUSY, "The server is busy: … Retry
 *   in a moment", HTTP 503 with Retry-After (load, not an outage: the
 *   database is fine, this instance cannot take more now);
 * - a GraphQL error raised on purpose (validation, variable coercion, our
 *   scalars, the auth gate) → as it is, with a code added when it has none;
 * - anything else → "Unexpected error." with INTERNAL_SERVER_ERROR, and the real
 *   error goes to the log only. Never SQL text, never a stack.
 */
import { GraphQLError, type GraphQLErrorOptions } from 'graphql'
import type { Plugin } from 'graphql-yoga'
import { DatabaseError, isPoolBusy } from '../../sql/db.ts'
import { AppError, ERROR_CODES } from '../errors.ts'
import type { Logger } from '../log.ts'
import { refusals } from '../refusalSampler.ts'

export const DATABASE_UNAVAILABLE_MESSAGE = 'The database is unavailable; retry shortly.'
export const UNEXPECTED_MESSAGE = 'Unexpected error.'
/** Seconds a client refused as BUSY is told to wait (Retry-After): the queue drains in well under that. */
export const BUSY_RETRY_AFTER_SECONDS = 1
export const DATABASE_BUSY_MESSAGE =
  'The server is busy: too many requests are waiting for the database. Retry in a moment, or send fewer at once.'
/** MariaDB's "Data too long for column" (strict mode refuses rather than truncates). */
const ER_DATA_TOO_LONG = 1406
/** Codes beyond the contract's own (docs/contract.md, "Errors"), for errors the GraphQL layer itself raises. */
export const API_CODES = {
  /** The document does not validate against the schema (or exceeds depth/cost limits). */
  GRAPHQL_VALIDATION_FAILED: 'GRAPHQL_VALIDATION_FAILED',
  /** A WebSocket already holds as many operations as one socket may. */
  TOO_MANY_OPERATIONS: 'TOO_MANY_OPERATIONS',
  /** The answer would pass MAX_ANSWER_BYTES: refused before it is built (src/api/answerSize.ts). */
  ANSWER_TOO_LARGE: 'ANSWER_TOO_LARGE',
  /** A bug or an unexpected failure; details are in the server log. */
  INTERNAL_SERVER_ERROR: 'INTERNAL_SERVER_ERROR',
} as const

/**
 * graphql-js echoes the offending value into coercion messages
 * (`Variable "$at" got invalid value "…"`); a pasted megabyte should not come
 * back as a megabyte. Long quoted strings are cut to their first 40 characters.
 */
export function shortenEchoes(message: string): string {
  if (message.length <= 300) return message
  return message
    .replace(/"((?:[^"\\]|\\.){60,})"/g, (_m, inner: string) => `"${inner.slice(0, 40)}..."`)
    .slice(0, 2000)
}

/** The innermost cause of a (possibly wrapped) GraphQL error. */
function rootCause(error: unknown): unknown {
  let e = error
  while (e instanceof GraphQLError && e.originalError) e = e.originalError
  return e
}

function located(error: unknown): GraphQLErrorOptions {
  if (!(error instanceof GraphQLError)) return {}
  return { nodes: error.nodes, source: error.source, positions: error.positions, path: error.path }
}

/**
 * The refusal of a request this instance cannot take now. Over HTTP yoga turns
 * `extensions.http` into the answer's status and headers (and leaves it out of
 * the body): 503 with Retry-After, which clients and proxies know as "retry".
 */
export function busyError(where: GraphQLErrorOptions = {}): GraphQLError {
  return new GraphQLError(DATABASE_BUSY_MESSAGE, {
    ...where,
    extensions: {
      code: ERROR_CODES.BUSY,
      http: { status: 503, headers: { 'retry-after': String(BUSY_RETRY_AFTER_SECONDS) } },
    },
  })
}

export type MaskError = (error: unknown, message: string) => Error

export function createMaskError(logger: Logger): MaskError {
  return (error) => {
    const cause = rootCause(error)
    const where = located(error)
    if (cause instanceof AppError) {
      const retryAfterSeconds = cause.details?.retryAfterSeconds
      return new GraphQLError(cause.message, {
        ...where,
        extensions: {
          ...cause.extensions,
          code: cause.code,
          ...(cause.code === ERROR_CODES.RATE_LIMITED &&
            typeof retryAfterSeconds === 'number' && { retryAfterSeconds }),
        },
      })
    }
    if (isPoolBusy(cause)) {
      // Load, not an outage: the statement never reached the database. Sampled:
      // a flood refused here wrote one line per request, on the loop it floods.
      const suppressed = refusals.take('database pool busy')
      if (suppressed !== null)
        logger.warn(
          { path: where?.path, ...(suppressed > 0 && { suppressed }) },
          'database pool busy: refused a request instead of queueing it',
        )
      return busyError(where)
    }
    if (cause instanceof DatabaseError && cause.unavailable) {
      logger.warn({ err: cause, path: where?.path }, 'database unavailable while answering a request')
      return new GraphQLError(DATABASE_UNAVAILABLE_MESSAGE, {
        ...where,
        extensions: { code: ERROR_CODES.DATABASE_UNAVAILABLE },
      })
    }
    if (cause instanceof DatabaseError && cause.errno === ER_DATA_TOO_LONG) {
      // A length the API layer failed to check: still the caller's input, so say
      // which field, never the statement.
      logger.warn({ err: cause, path: where?.path }, 'a value reached the database longer than its column')
      const column = /for column '([^']{1,64})'/.exec(
        String((cause.cause as Error | undefined)?.message),
      )?.[1]
      return new GraphQLError(
        `A value is longer than ${column ? `the ${column} field` : 'its field'} allows; shorten it and retry.`,
        { ...where, extensions: { code: ERROR_CODES.BAD_USER_INPUT } },
      )
    }
    if (error instanceof GraphQLError && cause instanceof GraphQLError) {
      // Raised on purpose somewhere in the GraphQL layer: keep its message.
      const code =
        error.extensions?.code ??
        cause.extensions?.code ??
        // No path: the request itself was wrong (variables, operation name).
        (error.path ? API_CODES.INTERNAL_SERVER_ERROR : ERROR_CODES.BAD_USER_INPUT)
      const message = shortenEchoes(error.message)
      if (error.extensions?.code === code && message === error.message) return error
      return new GraphQLError(message, { ...where, extensions: { ...error.extensions, code } })
    }
    logger.error({ err: cause, path: where?.path }, 'unexpected error while answering a request')
    return new GraphQLError(UNEXPECTED_MESSAGE, {
      ...where,
      extensions: { code: API_CODES.INTERNAL_SERVER_ERROR },
    })
  }
}

/**
 * Give validation errors a code: the one their cause carries (our scalars say
 * BAD_USER_INPUT), else GRAPHQL_VALIDATION_FAILED.
 */
export function useValidationErrorCodes(): Plugin {
  return {
    onValidate() {
      return ({ result, setResult }) => {
        if (result.length === 0) return
        setResult(
          result.map((e) => {
            if (e.extensions?.code && e.message.length <= 300) return e
            const cause = rootCause(e)
            const code =
              (cause instanceof GraphQLError ? cause.extensions?.code : undefined) ??
              API_CODES.GRAPHQL_VALIDATION_FAILED
            return new GraphQLError(shortenEchoes(e.message), {
              ...located(e),
              extensions: { ...e.extensions, code },
            })
          }),
        )
      }
    },
  }
}

/**
 * A refusal that also tells yoga its HTTP answer (`extensions.http`: status,
 * headers). Over HTTP yoga reads it and leaves it out of the body; graphql-ws
 * would send it in the message as it is, so it is not enumerable: read by
 * yoga, never serialized.
 */
export function refusalWithHttp(
  message: string,
  code: string,
  http?: { status: number; headers?: Record<string, string> },
): GraphQLError {
  const extensions: Record<string, unknown> = { code }
  if (http) Object.defineProperty(extensions, 'http', { value: http, enumerable: false })
  return new GraphQLError(message, { extensions })
}
