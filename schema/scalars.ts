/**
 * `DateTime` and `JSON`.
 *
 * DateTime goes out as `toISOString()` (always UTC with a `Z`). Coming in it
 * must be a full ISO-8601 / RFC 3339 date-time WITH a zone designator (`Z` or
 * `±hh:mm`): a zone-less wall time would be read in whatever zone the server
 * happens to run in, which is exactly the ambiguity a scheduler must not have.
 */
import { GraphQLError, Kind, type ValueNode } from 'graphql'
import { builder } from './builder.ts'

const ISO_DATE_TIME =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?([Zz]|[+-]\d{2}(?::?\d{2})?)$/

function shown(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value))
  const cut = text.length > 40 ? `${text.slice(0, 37)}...` : text
  return JSON.stringify(cut)
}

function badDateTime(value: unknown): GraphQLError {
  return new GraphQLError(
    `DateTime must be an ISO-8601 date-time with a time zone, e.g. "2025-06-01T18:30:00Z" or "2025-06-01T20:30:00+02:00" (got ${shown(value)}).`,
    { extensions: { code: 'BAD_USER_INPUT' } },
  )
}

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate()
}

/** Parse an ISO-8601 date-time with a zone; throws a BAD_USER_INPUT GraphQLError otherwise. */
export function parseDateTime(value: unknown): Date {
  if (typeof value !== 'string') throw badDateTime(value)
  const m = ISO_DATE_TIME.exec(value.trim())
  if (!m) throw badDateTime(value)
  const [, y, mo, d, h, mi, s = '0', frac = '', zone = 'Z'] = m
  const year = Number(y)
  const month = Number(mo)
  const day = Number(d)
  const hour = Number(h)
  const minute = Number(mi)
  const second = Number(s)
  if (
    year < 1000 ||
    month < 1 ||
    month > 12 ||
    day < 1 ||
    day > daysInMonth(year, month) ||
    hour > 23 ||
    minute > 59 ||
    second > 59
  ) {
    throw badDateTime(value)
  }
  let offsetMinutes = 0
  if (zone !== 'Z' && zone !== 'z') {
    const sign = zone.startsWith('-') ? -1 : 1
    const digits = zone.slice(1).replace(':', '')
    const oh = Number(digits.slice(0, 2))
    const om = Number(digits.slice(2) || '0')
    if (oh > 14 || om > 59) throw badDateTime(value)
    offsetMinutes = sign * (oh * 60 + om)
  }
  const ms = Number(frac.padEnd(3, '0').slice(0, 3))
  const t = Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMinutes * 60_000
  const date = new Date(t)
  const utcYear = date.getUTCFullYear()
  if (Number.isNaN(t) || utcYear < 1000 || utcYear > 9999) throw badDateTime(value)
  return date
}

export const DateTimeScalar = builder.scalarType('DateTime', {
  description:
    'An instant as ISO-8601. Always answered in UTC with a Z ("2025-06-01T18:30:00.000Z"); accepted with any zone designator.',
  serialize: (value) => {
    const date = value instanceof Date ? value : new Date(String(value))
    if (Number.isNaN(date.getTime())) throw new GraphQLError('DateTime cannot represent an invalid date.')
    return date.toISOString()
  },
  parseValue: (value) => parseDateTime(value),
  parseLiteral: (ast) => {
    if (ast.kind !== Kind.STRING)
      throw badDateTime(ast.kind === Kind.INT || ast.kind === Kind.FLOAT ? ast.value : ast.kind)
    return parseDateTime(ast.value)
  },
})

/**
 * The deepest JSON value accepted (containers inside containers). MariaDB's
 * JSON_VALID, behind every JSON column's CHECK, refuses documents nested past
 * 31 levels, and stored rows wrap API values a level or two deeper (a run's
 * params inside its log line's data); Node's JSON.stringify overflows its
 * stack a few thousand levels down. Either way a deep value used to surface as
 * "Unexpected error." (the fuzz drill, test/drills/fuzz.drill.test.ts, found both).
 */
export const MAX_JSON_DEPTH = 24

/** The problem with a JSON value the database could not store, or null. Iterative: safe on any depth. */
export function jsonValueProblem(value: unknown, maxDepth = MAX_JSON_DEPTH): string | null {
  const stack: [unknown, number][] = [[value, 0]]
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number]
    if (typeof v === 'number' && !Number.isFinite(v)) return 'JSON numbers must be finite.'
    if (v === null || typeof v !== 'object') continue
    if (depth + 1 > maxDepth) return `JSON may nest at most ${maxDepth} levels of objects and arrays.`
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1])
  }
  return null
}

function checkedJson(value: unknown): unknown {
  const problem = jsonValueProblem(value)
  if (problem) throw new GraphQLError(problem, { extensions: { code: 'BAD_USER_INPUT' } })
  return value
}

function jsonLiteral(ast: ValueNode, variables: Record<string, unknown> | null | undefined): unknown {
  switch (ast.kind) {
    case Kind.STRING:
    case Kind.BOOLEAN:
      return ast.value
    case Kind.INT:
    case Kind.FLOAT:
      return Number(ast.value)
    case Kind.NULL:
      return null
    case Kind.LIST:
      return ast.values.map((v) => jsonLiteral(v, variables))
    case Kind.OBJECT:
      return Object.fromEntries(ast.fields.map((f) => [f.name.value, jsonLiteral(f.value, variables)]))
    case Kind.VARIABLE:
      return variables ? variables[ast.name.value] : undefined
    default:
      throw new GraphQLError(`JSON cannot represent a ${ast.kind} literal.`, {
        extensions: { code: 'BAD_USER_INPUT' },
      })
  }
}

export const JSONScalar = builder.scalarType('JSON', {
  description: 'Any JSON value: object, array, string, number, boolean or null.',
  serialize: (value) => value,
  parseValue: (value) => checkedJson(value),
  parseLiteral: (ast, variables) => checkedJson(jsonLiteral(ast, variables)),
})
