import type { SqlValue } from './db.ts'
import { BATCH_TEXT_BYTES, cutBySize } from './statements.ts'

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

const placeholderCache = new Map<number, string>()

/** `?, ?, ?` for an IN list of `n` values (n ≥ 1). */
export function placeholders(n: number): string {
  let text = placeholderCache.get(n)
  if (text === undefined) {
    text = n > 0 ? `?${', ?'.repeat(n - 1)}` : ''
    // Batches repeat a few shapes (IN lists of a batch size, a row's columns).
    if (placeholderCache.size < 256) placeholderCache.set(n, text)
  }
  return text
}

/** Rows per multi-row statement, at most. */
const MAX_ROWS_PER_STATEMENT = 2000

/**
 * Split rows for multi-row statements so each stays within a row count and a
 * byte budget; `size` estimates a row's variable part (a long log message, a
 * large step's params). A single row over the budget still gets a chunk of its own.
 */
export function chunkRows<T>(rows: readonly T[], size: (row: T) => number): T[][] {
  // Values well under MariaDB's packet limit (BATCH_TEXT_BYTES), whatever the rows carry.
  return cutBySize(rows, (row) => size(row) + 64, BATCH_TEXT_BYTES, MAX_ROWS_PER_STATEMENT)
}

/** Rows per `CASE id WHEN … END` statement: the CASE is read in order for every row it updates. */
const MAX_ROWS_PER_CASE = 500

/**
 * `CASE <column> WHEN ? THEN ? … END` giving each row its own value in one
 * multi-row UPDATE, with its arguments; `pairs` holds at most
 * {@link MAX_ROWS_PER_CASE} rows (split them with {@link chunkCase}).
 */
export function caseOf(
  column: string,
  pairs: readonly (readonly [id: number, value: SqlValue])[],
): {
  sql: string
  args: SqlValue[]
} {
  const args: SqlValue[] = []
  for (const [id, value] of pairs) args.push(id, value)
  return { sql: `CASE ${column}${' WHEN ? THEN ?'.repeat(pairs.length)} END`, args }
}

/** Split rows for {@link caseOf} statements. */
export function chunkCase<T>(rows: readonly T[]): T[][] {
  const chunks: T[][] = []
  for (let i = 0; i < rows.length; i += MAX_ROWS_PER_CASE) chunks.push(rows.slice(i, i + MAX_ROWS_PER_CASE))
  return chunks
}

/**
 * `column` is one of `ids`, as a condition with its arguments: each run of
 * consecutive ids as one `BETWEEN`, the ids in no such run as one `IN` list.
 * The same rows as `column IN (ids)` (ids are integers, so a range of
 * consecutive ones holds nothing else), but far cheaper for MariaDB to plan:
 * its range optimiser builds a tree node per `IN` value, which for a start
 * batch of 2,500 runs was a tenth of the server's time, while runs materialised
 * together get consecutive ids and make a range or a few. `ids` must not be empty.
 */
export function idSet(column: string, ids: readonly number[]): { sql: string; args: number[] } {
  // A typed array sorts numerically without a comparator call per pair; repeats are skipped below.
  const sorted = Float64Array.from(ids).sort()
  const ranges: number[] = []
  const loose: number[] = []
  for (let i = 0; i < sorted.length; ) {
    // A run of consecutive ids, repeats included: [i, j].
    let j = i
    while (j + 1 < sorted.length && (sorted[j + 1] as number) - (sorted[j] as number) <= 1) j++
    const from = sorted[i] as number
    const to = sorted[j] as number
    // A run of up to three ids is no cheaper as a range than as IN values.
    if (to - from >= 3) ranges.push(from, to)
    else for (let id = from; id <= to; id++) loose.push(id)
    i = j + 1
  }
  const parts: string[] = []
  for (let r = 0; r < ranges.length; r += 2) parts.push(`${column} BETWEEN ? AND ?`)
  if (loose.length > 0) parts.push(`${column} IN (${placeholders(loose.length)})`)
  const sql = parts.length === 1 ? (parts[0] as string) : `(${parts.join(' OR ')})`
  return { sql, args: [...ranges, ...loose] }
}
