/** JSON columns arrive as text from MariaDB (its JSON type is LONGTEXT). */
export function parseJson<T = unknown>(value: unknown, fallback: T): T {
  if (value === null || value === undefined) return fallback
  if (typeof value !== 'string') return value as T
  try {
    return JSON.parse(value) as T
  } catch {
    // A column written by this code is always valid JSON; anything else is
    // surfaced as the fallback rather than crashing a list screen.
    return fallback
  }
}

/**
 * A lone UTF-16 surrogate as JSON.stringify writes it: `\udfff`, the backslash
 * itself not escaped (paired surrogates are written as the character).
 */
const LONE_SURROGATE = /(?<=(?:^|[^\\])(?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/gi

/**
 * The text a JSON column stores; `undefined` and `null` store SQL NULL. A lone
 * surrogate (legal in a JavaScript or GraphQL string, not in UTF-8) becomes
 * U+FFFD, as it does in text columns: MariaDB's JSON_VALID, every JSON column's
 * CHECK, refuses the escape, and a note like "\udfff" failed a whole
 * mutation with "Unexpected error." (the fuzz drill found it).
 */
export function toJson(value: unknown): string | null {
  if (value === undefined || value === null) return null
  const text = JSON.stringify(value)
  if (text === undefined) return null
  return /\\ud[89a-f]/i.test(text) ? text.replace(LONE_SURROGATE, '\\ufffd') : text
}

/** Clamp a LIMIT to an integer in [min, max]; the only way a number reaches SQL text. */
export function clampLimit(value: unknown, fallback: number, min = 1, max = 500): number {
  const n = Math.trunc(Number(value))
  if (!Number.isFinite(n)) return fallback
  return Math.min(Math.max(n, min), max)
}

/** `?, ?, ?` for an IN list of `n` values (n ≥ 1). */
export function placeholders(n: number): string {
  return Array.from({ length: n }, () => '?').join(', ')
}
