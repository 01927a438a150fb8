/**
 * A plan as people read it: each definition that changes, the fields that
 * change (now → in the files), and the program step by step (- now, + files).
 */

export interface Change {
  slug: string
  action: 'CREATE' | 'UPDATE' | 'UNCHANGED' | 'ARCHIVE'
  fields: string[]
  newVersion: number | null
}

type Manifest = Record<string, unknown>

function show(value: unknown): string {
  return value === undefined ? '(default)' : JSON.stringify(value)
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** JSON with keys sorted, so key order in a file is no difference. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    isObject(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, v[k]]),
        )
      : v,
  )
}

/** One line per step, keyed by phase and position: `main[1] core.cue {"prompt":"Go?"}`. */
function stepLines(program: unknown): Map<string, string> {
  const lines = new Map<string, string>()
  const phases = isObject(program) && Array.isArray(program.phases) ? program.phases : []
  for (const phase of phases) {
    if (!isObject(phase) || !Array.isArray(phase.steps)) continue
    const name = `${String(phase.name)}${phase.ending === true ? ' (ending)' : ''}`
    phase.steps.forEach((step: unknown, i) => {
      if (!isObject(step)) return
      const { kind, ...rest } = step
      lines.set(`${name}[${i}]`, `${String(kind)} ${canonicalJson(rest)}`)
    })
  }
  return lines
}

function programDiff(before: unknown, after: unknown): string[] {
  const a = stepLines(before)
  const b = stepLines(after)
  const out: string[] = []
  for (const [key, line] of b) {
    const old = a.get(key)
    if (old === line) continue
    if (old !== undefined) out.push(`      - ${key} ${old}`)
    out.push(`      + ${key} ${line}`)
  }
  for (const [key, line] of a) if (!b.has(key)) out.push(`      - ${key} ${line}`)
  return out
}

const MARK: Record<Change['action'], string> = { CREATE: '+', UPDATE: '~', ARCHIVE: '-', UNCHANGED: '=' }

/** The readable diff of `changes`; `current` and `wanted` are the manifests now and in the files, by slug. */
export function renderDiff(
  changes: readonly Change[],
  current: ReadonlyMap<string, Manifest>,
  wanted: ReadonlyMap<string, Manifest>,
): string[] {
  const lines: string[] = []
  for (const c of changes) {
    if (c.action === 'UNCHANGED') continue
    const version = c.newVersion ? `, version ${c.newVersion}` : ''
    lines.push(`${MARK[c.action]} ${c.slug} (${c.action.toLowerCase()}${version})`)
    const now = current.get(c.slug)
    const then = wanted.get(c.slug)
    for (const field of c.fields) {
      if (field === 'program') {
        lines.push('    program:')
        lines.push(...programDiff(now?.program, then?.program))
      } else if (c.action === 'CREATE') {
        lines.push(`    ${field}: ${show(then?.[field])}`)
      } else if (c.action === 'ARCHIVE' && !then) {
        lines.push(`    state: ${show(now?.state)} → "ARCHIVED" (no file names it)`)
      } else {
        lines.push(`    ${field}: ${show(now?.[field])} → ${show(then?.[field])}`)
      }
    }
  }
  return lines
}
