/**
 * No trigger writes run alerts any more (migration 0027): the statement that
 * ends or degrades runs must send the alert statements it owes. Read from the
 * source, so that a new path that forgets fails here, not in production:
 *
 * - every caller of `transitionSets` either names a status that raises no
 *   alert, or takes the `owed` it answers and sends `alertStatementsFor(owed, …)`;
 * - no statement text updates `event_runs` into completed, failed or missed,
 *   or into degraded health, without stamping `alert_stamp`.
 *
 * notify.runAlertPaths.test.ts proves the paths that exist write their alerts.
 */
import { readFileSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import { expect, it } from 'vitest'
import { sourceFiles } from './helpers/sourceFiles.ts'

const ROOT = resolve(import.meta.dirname, '..')

const files = [...sourceFiles(join(ROOT, 'sql'), /\.ts$/), ...sourceFiles(join(ROOT, 'src'), /\.ts$/)].map(
  (path) => ({
    name: relative(ROOT, path),
    text: readFileSync(path, 'utf8'),
  }),
)

/** Statuses a move may name literally without owing an alert. */
const SILENT = new Set(['cancelled', 'paused', 'running', 'ending', 'starting', 'scheduled'])

it('every caller of transitionSets sends the alert its move owes, or names a status that owes none', () => {
  const forgetful: string[] = []
  let callers = 0
  for (const { name, text } of files) {
    for (const m of text.matchAll(/const \{([^}]*)\} = transitionSets\(\s*([^,]+),/g)) {
      callers++
      const [, destructured = '', target = ''] = m
      const literal = /^'([a-z]+)'$/.exec(target.trim())?.[1]
      if (literal !== undefined && SILENT.has(literal)) continue
      if (!/\bowed\b/.test(destructured) || !text.includes('alertStatementsFor(owed'))
        forgetful.push(`${name}: ${m[0]}`)
    }
  }
  expect(callers).toBeGreaterThanOrEqual(5)
  expect(forgetful).toEqual([])
})

it('no statement text ends or degrades runs without stamping them', () => {
  const unstamped: string[] = []
  for (const { name, text } of files) {
    for (const m of text.matchAll(/`UPDATE event_runs[^`]*`/g)) {
      const sql = m[0]
      const setPart = sql.slice(
        sql.indexOf('SET'),
        sql.search(/\bWHERE\b/) === -1 ? undefined : sql.search(/\bWHERE\b/),
      )
      const ends = /\bstatus = '(completed|failed|missed)'/.test(setPart)
      const degrades = /\bhealth = 'degraded'/.test(setPart)
      if ((ends || degrades) && !/alert_stamp = \?/.test(setPart))
        unstamped.push(`${name}: ${sql.slice(0, 80)}`)
    }
  }
  expect(unstamped).toEqual([])
})
