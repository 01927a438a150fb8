/**
 * Argument checks shared by resolvers. IDs are strings of numeric database ids:
 * anything else is the caller's mistake (BAD_USER_INPUT), said plainly, and a
 * hostile value is never echoed back at length.
 */
import { badInput } from '../errors.ts'

/** A value as it may appear in a message: JSON-quoted and cut short. */
export function shown(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value))
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 37)}...` : text)
}

const NUMERIC_ID = /^\d{1,15}$/

/** The numeric id in an ID argument; BAD_USER_INPUT when it is not one. */
export function parseId(value: unknown, name: string): number {
  const text = typeof value === 'number' ? String(value) : value
  if (typeof text === 'string' && NUMERIC_ID.test(text.trim())) {
    const n = Number(text.trim())
    if (Number.isSafeInteger(n) && n > 0) return n
  }
  throw badInput(`${name} must be a numeric id such as "42" (got ${shown(value)}).`)
}

/** {@link parseId} for an optional argument: null and undefined pass through as null. */
export function parseOptionalId(value: unknown, name: string): number | null {
  return value === null || value === undefined ? null : parseId(value, name)
}

/** An integer argument with a default: an explicit null means "use the default". */
export function withDefault(value: number | null | undefined, fallback: number): number {
  return value === null || value === undefined ? fallback : value
}
