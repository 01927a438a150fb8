/**
 * Errors a person can act on. Each carries a code of the contract (docs/contract.md, "Errors"); the API turns an
 * AppError into a GraphQL error with `extensions.code`, and masks everything else.
 */

/** The error codes clients see in `extensions.code`. */
export const ERROR_CODES = {
  /** An id or slug names nothing. */
  NOT_FOUND: 'NOT_FOUND',
  /** An argument is malformed: bad cron, unknown zone, invalid program, … */
  BAD_USER_INPUT: 'BAD_USER_INPUT',
  /** No token, or a token that matches none configured. */
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  /** The token's role may not do this. */
  FORBIDDEN: 'FORBIDDEN',
  /** The request conflicts with current state (duplicate slug, archiving a definition with live runs). */
  CONFLICT: 'CONFLICT',
  /** The database cannot be reached right now; retry later. */
  DATABASE_UNAVAILABLE: 'DATABASE_UNAVAILABLE',
  /** A per-principal quota is used up; `extensions.retryAfterSeconds` says when to retry. */
  RATE_LIMITED: 'RATE_LIMITED',
  /** This instance cannot take the request now (load, not an outage); retry after Retry-After. */
  BUSY: 'BUSY',
} as const
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES]

export class AppError extends Error {
  override readonly name = 'AppError'
  constructor(
    readonly code: ErrorCode,
    message: string,
    opts: {
      cause?: unknown
      details?: Record<string, unknown>
      /** Shown to clients beside `code` in `extensions` (e.g. every problem with its path). */
      extensions?: Record<string, unknown>
    } = {},
  ) {
    super(message, { cause: opts.cause })
    this.details = opts.details
    this.extensions = opts.extensions
  }
  readonly details: Record<string, unknown> | undefined
  readonly extensions: Record<string, unknown> | undefined
}

export const notFound = (what: string, id: string | number) =>
  new AppError(ERROR_CODES.NOT_FOUND, `No ${what} with id ${JSON.stringify(String(id))} exists.`)

export const badInput = (message: string, details?: Record<string, unknown>) =>
  new AppError(ERROR_CODES.BAD_USER_INPUT, message, { details })

export const conflict = (message: string, details?: Record<string, unknown>) =>
  new AppError(ERROR_CODES.CONFLICT, message, { details })
