/**
 * `{{placeholder}}` rendering for step params and the definition's concurrency
 * key. Deliberately tiny: no logic, no escaping, only names from a fixed list, so
 * a program's meaning is visible in its JSON and checkable at publish time.
 *
 * Names: `run.scope`, `run.scheduledFor`, `run.id`, `params.NAME`,
 * `definition.title`, `definition.slug`. Whitespace inside the braces is allowed
 * (`{{ run.scope }}`). An unknown name is a publish-time problem
 * ({@link templateProblems}); should one reach runtime anyway it renders as ''.
 *
 * `{{secret.NAME}}` is left as it is here: only a kind that declares
 * `acceptsSecrets` (`core.webhook`) resolves it, at the moment it sends, and
 * keeps the value out of everything it answers (see secrets.ts). Rendering it
 * here would put the value into whatever a step logs or stores.
 *
 * One pass: a rendered value is text, never a template. Secret references
 * come only from the program as published: after rendering, every
 * `{{secret.…}}` the program did not write itself (a value holding one, or
 * values and text joined into one, as `{{params.a}}{{params.b}}` with a = "{"
 * and b = "{secret.X}}") is broken with a space between its braces, so the
 * webhook that resolves references never sees it as one.
 */
import { SECRET_ENV_PREFIX, SECRET_NAME, secretReferencePattern } from './secrets.ts'

/** What a template can refer to. */
export interface TemplateVars {
  run: {
    scope: string
    /** Rendered as ISO-8601 UTC with a Z (`Date.toISOString()`), only where a template names it. */
    scheduledFor: Date
    id: number | string
  }
  /** The run's `params` (from `startRun`); null when none were given. */
  params: Record<string, unknown> | null
  definition: { title: string; slug?: string }
}

/** One problem with a template, `path` in the JSON-path style of program validation. */
export interface TemplateProblem {
  path: string
  message: string
}

const PLACEHOLDER = /\{\{([^{}]*)\}\}/g
const KNOWN_FIXED = [
  'run.scope',
  'run.scheduledFor',
  'run.id',
  'definition.title',
  'definition.slug',
] as const
const PARAM_NAME = /^params\.([A-Za-z_][A-Za-z0-9_-]*)$/

/** The placeholder names a template may use, for error messages. */
export const TEMPLATE_NAMES: readonly string[] = [...KNOWN_FIXED, 'params.NAME', 'secret.NAME (core.webhook)']

function isKnown(name: string): boolean {
  return (KNOWN_FIXED as readonly string[]).includes(name) || PARAM_NAME.test(name)
}

/** A params value inside a string: text as is, anything else as JSON, absent as ''. */
function stringify(value: unknown): string {
  if (value === undefined || value === null) return ''
  if (typeof value === 'string') return value
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  return JSON.stringify(value)
}

function lookup(name: string, vars: TemplateVars): string {
  switch (name) {
    case 'run.scope':
      return vars.run.scope
    case 'run.scheduledFor':
      return vars.run.scheduledFor.toISOString()
    case 'run.id':
      return String(vars.run.id)
    case 'definition.title':
      return vars.definition.title
    case 'definition.slug':
      return vars.definition.slug ?? ''
  }
  const param = PARAM_NAME.exec(name)
  if (param && vars.params && Object.hasOwn(vars.params, param[1]!)) return stringify(vars.params[param[1]!])
  return ''
}

/**
 * `rendered` with every secret reference broken except those starting at
 * `programRefs` (offsets in `rendered` of the references the program wrote).
 * A broken one reads `{ {secret.X}}`: the space cannot join with what is
 * before it into another reference.
 */
function withoutForgedReferences(rendered: string, programRefs: ReadonlySet<number>): string {
  let out = ''
  let last = 0
  for (const m of rendered.matchAll(secretReferencePattern())) {
    if (programRefs.has(m.index)) continue
    out += `${rendered.slice(last, m.index)}{ `
    last = m.index + 1
  }
  return last === 0 ? rendered : out + rendered.slice(last)
}

function renderString(text: string, vars: TemplateVars): string {
  if (!text.includes('{{')) return text
  let out = ''
  let last = 0
  const programRefs = new Set<number>()
  for (const m of text.matchAll(PLACEHOLDER)) {
    out += text.slice(last, m.index)
    const name = m[1]!.trim()
    if (name.startsWith('secret.')) {
      programRefs.add(out.length)
      out += m[0]
    } else {
      out += lookup(name, vars)
    }
    last = m.index + m[0].length
  }
  out += text.slice(last)
  return withoutForgedReferences(out, programRefs)
}

/**
 * Render every string inside `value` (nested objects and arrays; keys are left
 * alone). Placeholders render as text, so `"{{params.count}}"` becomes `"5"`,
 * not the number 5. Answers a new value; the input is not changed.
 */
export function renderTemplate(value: unknown, vars: TemplateVars): unknown {
  if (typeof value === 'string') return renderString(value, vars)
  if (Array.isArray(value)) return value.map((item) => renderTemplate(item, vars))
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[key] = renderTemplate(item, vars)
    return out
  }
  return value
}

/** Append a key or index to a JSON path: `a.b`, `a[0]`, `a["odd key"]`. */
export function joinPath(base: string, key: string | number): string {
  if (typeof key === 'number') return `${base}[${key}]`
  if (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) return base === '' ? key : `${base}.${key}`
  return `${base}[${JSON.stringify(key)}]`
}

/**
 * Every unknown placeholder inside `value`, each with its path below `basePath`
 * (a string template on its own reports at `basePath`). Empty = fine.
 */
export function templateProblems(
  value: unknown,
  basePath = '',
  opts: { secrets?: boolean } = {},
): TemplateProblem[] {
  const problems: TemplateProblem[] = []
  const walk = (v: unknown, path: string): void => {
    if (typeof v === 'string') {
      for (const match of v.matchAll(PLACEHOLDER)) {
        const name = match[1]!.trim()
        if (name.startsWith('secret.')) {
          const secret = name.slice('secret.'.length)
          if (!opts.secrets) {
            problems.push({
              path,
              message: `"{{${name}}}": secrets may be used only in the params of a step kind that accepts them (core.webhook url, headers and body)`,
            })
          } else if (!SECRET_NAME.test(secret)) {
            problems.push({
              path,
              message: `"{{${name}}}": a secret's name is A-Z, 0-9 and _, starting with a letter (its value is read from ${SECRET_ENV_PREFIX}NAME)`,
            })
          }
        } else if (!isKnown(name)) {
          problems.push({
            path,
            message: `unknown placeholder "{{${name}}}" (known: ${TEMPLATE_NAMES.join(', ')})`,
          })
        }
      }
    } else if (Array.isArray(v)) {
      for (const [i, item] of v.entries()) walk(item, joinPath(path, i))
    } else if (v !== null && typeof v === 'object') {
      for (const [key, item] of Object.entries(v)) walk(item, joinPath(path, key))
    }
  }
  walk(value, basePath)
  return problems
}
