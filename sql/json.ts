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

/** The text a JSON column stores; `undefined` and `null` store SQL NULL. */
export function toJson(value: unknown): string | null {
  return value === undefined || value === null ? null : JSON.stringify(value)
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
