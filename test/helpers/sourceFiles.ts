/**
 * The project's own files under a folder, for tests that read the source
 * (import loops, statements that must keep a rule).
 */
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

/** Every file under `dir` whose name matches `pattern`, skipping node_modules and dot-folders. */
export function sourceFiles(dir: string, pattern: RegExp): string[] {
  const out: string[] = []
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue
    const path = join(dir, name)
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path, pattern))
    else if (pattern.test(name)) out.push(path)
  }
  return out
}
