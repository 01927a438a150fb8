/**
 * Manifests from files: JSON or YAML, one manifest or a list per file (YAML
 * may also hold several documents), and a directory stands for every
 * *.yaml, *.yml and *.json directly in it, by name.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { extname, join } from 'node:path'
import { parseAllDocuments } from 'yaml'

const EXTENSIONS = new Set(['.yaml', '.yml', '.json'])

/** The manifests in order, and where each came from (for problems: "shows/quiz.yaml: title"). */
export interface Loaded {
  manifests: unknown[]
  sources: string[]
}

function filesOf(path: string): string[] {
  let stat: ReturnType<typeof statSync>
  try {
    stat = statSync(path)
  } catch {
    throw new Error(`${path}: no such file or directory`)
  }
  if (!stat.isDirectory()) return [path]
  const names = readdirSync(path)
    .filter((n) => EXTENSIONS.has(extname(n).toLowerCase()))
    .sort()
  if (names.length === 0) throw new Error(`${path}: no *.yaml, *.yml or *.json file in this directory`)
  return names.map((n) => join(path, n))
}

function documentsOf(file: string): unknown[] {
  const text = readFileSync(file, 'utf8')
  if (extname(file).toLowerCase() === '.json') {
    try {
      return [JSON.parse(text)]
    } catch (err) {
      throw new Error(`${file}: not valid JSON (${(err as Error).message})`)
    }
  }
  const docs = parseAllDocuments(text)
  const list = Array.isArray(docs) ? docs : [docs]
  const values: unknown[] = []
  for (const doc of list) {
    const error = doc.errors[0]
    if (error) throw new Error(`${file}: not valid YAML: ${error.message.split('\n')[0]}`)
    const value = doc.toJS()
    if (value !== null && value !== undefined) values.push(value)
  }
  return values
}

export function loadManifests(paths: readonly string[]): Loaded {
  const manifests: unknown[] = []
  const sources: string[] = []
  for (const file of paths.flatMap(filesOf)) {
    const docs = documentsOf(file)
    docs.forEach((doc, d) => {
      const items = Array.isArray(doc) ? doc : [doc]
      items.forEach((item, k) => {
        manifests.push(item)
        const where = docs.length > 1 ? `#${d + 1}` : ''
        sources.push(Array.isArray(doc) ? `${file}${where}[${k}]` : `${file}${where}`)
      })
    })
  }
  return { manifests, sources }
}

/** A problem path of the whole list (`[3].program.phases[0]`) as its file's (`shows/x.yaml: program.phases[0]`). */
export function inFile(path: string, sources: readonly string[]): string {
  const m = /^\[(\d+)\]\.?(.*)$/.exec(path)
  const source = m ? sources[Number(m[1])] : undefined
  if (!m || source === undefined) return path
  return m[2] ? `${source}: ${m[2]}` : source
}
