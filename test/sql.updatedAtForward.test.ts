/**
 * The counts by status find the runs that ended after a mark through
 * idx_evrun_updated (migration 0028: there is no index of `ended_at`), which is
 * right only while every run's `updated_at` is at least its `ended_at`: the
 * statement that stamps `ended_at` stamps `updated_at` (ON UPDATE, the same
 * NOW(3)) and nothing sets `updated_at` back. Read from the source, so that a
 * statement that would set it to a value of its own fails here rather than
 * leaving runs out of `/metrics` and `health`. runCounts.test.ts proves the
 * counts with runs changed after they ended.
 */
import { readFileSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import { expect, it } from 'vitest'
import { sourceFiles } from './helpers/sourceFiles.ts'

const ROOT = resolve(import.meta.dirname, '..')

// sql/ holds the migrations (.sql) beside the statements (.ts).
const files = [
  ...sourceFiles(join(ROOT, 'sql'), /\.(ts|sql)$/),
  ...sourceFiles(join(ROOT, 'src'), /\.ts$/),
].map((path) => ({ name: relative(ROOT, path), text: readFileSync(path, 'utf8') }))

/** Tables other than event_runs that have an `updated_at` of their own, set freely. */
const OTHER_TABLES = /\b(event_definitions|calendars|occurrence_overrides|event_run_steps)\b/

/** The statement text around position `at`: from the last backtick, quote or `;;` before it. */
function statementAround(text: string, at: number): string {
  const start = Math.max(text.lastIndexOf('`', at), text.lastIndexOf("'", at), text.lastIndexOf(';;', at))
  return text.slice(Math.max(0, start), at + 200)
}

it('no statement sets a run’s updated_at to anything but itself or NOW(3)', () => {
  const offending: string[] = []
  let seen = 0
  for (const { name, text } of files) {
    for (const m of text.matchAll(/\b(?:\w+\.)?updated_at\s*=\s*([^\s,)]+)/g)) {
      const [whole, value = ''] = m
      const comparison = /^\s*(AND|OR)\b/i.test(text.slice((m.index ?? 0) + whole.length))
      if (value === '?' && comparison) continue // a keyset's comparison, not an assignment
      seen++
      if (/^(\w+\.)?updated_at$/.test(value) || /^NOW\(3\)$/i.test(value)) continue
      const statement = statementAround(text, m.index ?? 0)
      if (OTHER_TABLES.test(statement) && !/\bevent_runs\b/.test(statement)) continue
      offending.push(`${name}: ${whole.trim()}`)
    }
  }
  expect(seen).toBeGreaterThan(0)
  expect(offending).toEqual([])
})

it('the counts by status find ended runs through updated_at, and check ended_at on the rows', () => {
  const counts = readFileSync(join(ROOT, 'sql', 'eventRuns', 'counts.ts'), 'utf8')
  expect(counts).toContain("const ENDED_SINCE = 'updated_at > ? AND ended_at > ?'")
  expect(counts).not.toContain('idx_evrun_ended_health')
})
