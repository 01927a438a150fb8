/**
 * No import loops in the project's own code: every relative import (type-only
 * ones included, since a loop of types is still a loop a reader must untangle)
 * is followed from every source file, and a file reached again on the path
 * that led to it is a loop. Read from the source text, so a new loop fails
 * here before anyone has to run a tool to find it.
 */
import { readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import { sourceFiles } from './helpers/sourceFiles.ts'

const ROOT = resolve(import.meta.dirname, '..')
const DIRS = ['src', 'sql', 'schema', 'resolvers', 'console']
const SOURCE = /\.(ts|tsx)$/
// `import … from './x.ts'`, `export … from './x.ts'`, `import './x.ts'` and `import('./x.ts')`.
const SPECIFIER =
  /(?:^|[\s;])(?:import|export)\b[^'"]*?from\s*['"](\.[^'"]+)['"]|import\s*\(?\s*['"](\.[^'"]+)['"]/g

/** Relative imports of one file, resolved to files (an import of a file outside the scanned tree is kept and leads nowhere). */
function importsOf(file: string, text: string): string[] {
  const out: string[] = []
  for (const m of text.matchAll(SPECIFIER)) {
    const spec = m[1] ?? m[2]
    if (spec) out.push(resolve(dirname(file), spec))
  }
  return out
}

/** Every loop in the graph, each as the files along it (the first repeated at the end). */
function findCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = []
  const state = new Map<string, 'open' | 'done'>()
  const path: string[] = []
  const visit = (file: string) => {
    state.set(file, 'open')
    path.push(file)
    for (const next of graph.get(file) ?? []) {
      if (!graph.has(next)) continue
      const s = state.get(next)
      if (s === 'open') cycles.push([...path.slice(path.indexOf(next)), next])
      else if (s === undefined) visit(next)
    }
    path.pop()
    state.set(file, 'done')
  }
  for (const file of graph.keys()) if (!state.has(file)) visit(file)
  return cycles
}

describe('imports', () => {
  it('finds a loop when there is one (the check can fail)', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
    ])
    expect(findCycles(graph)).toEqual([['a', 'b', 'c', 'a']])
    expect(importsOf('/p/x.ts', "import type { A } from './a.ts'\nexport * from '../b.ts'")).toEqual([
      '/p/a.ts',
      '/b.ts',
    ])
  })

  it('form no loop in src/, sql/, schema/, resolvers/ or console/', () => {
    const graph = new Map<string, string[]>()
    for (const dir of DIRS)
      for (const file of sourceFiles(join(ROOT, dir), SOURCE))
        graph.set(file, importsOf(file, readFileSync(file, 'utf8')))
    expect(graph.size).toBeGreaterThan(100)
    const loops = findCycles(graph).map((c) => c.map((f) => relative(ROOT, f)).join(' → '))
    expect(loops).toEqual([])
  })

  it('keep schema/ from reaching resolvers/: src/api/schema.ts composes the two', () => {
    const graph = new Map<string, string[]>()
    for (const dir of DIRS)
      for (const file of sourceFiles(join(ROOT, dir), SOURCE))
        graph.set(file, importsOf(file, readFileSync(file, 'utf8')))
    const resolvers = join(ROOT, 'resolvers')
    const reached = new Set<string>()
    const walk = (file: string) => {
      if (reached.has(file)) return
      reached.add(file)
      for (const next of graph.get(file) ?? []) walk(next)
    }
    for (const file of graph.keys()) if (file.startsWith(join(ROOT, 'schema'))) walk(file)
    expect([...reached].filter((f) => f.startsWith(resolvers)).map((f) => relative(ROOT, f))).toEqual([])
    // It can fail: the module that composes them reaches both.
    reached.clear()
    walk(join(ROOT, 'src/api/schema.ts'))
    expect([...reached].some((f) => f.startsWith(resolvers))).toBe(true)
  })
})
