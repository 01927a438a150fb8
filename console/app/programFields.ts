/**
 * Completion for the program editor from the committed JSON Schema
 * (schema/definition.schema.json, the one `GET /schema/definition.json`
 * serves, bundled with the console: no CDN): the fields the schema allows in
 * the object the cursor is in, less those already written, and the text that
 * adds one.
 */
import definitionSchema from '../../schema/definition.schema.json' with { type: 'json' }
import { jsonPlaces, objectAt } from './jsonPaths.ts'

interface SchemaNode {
  type?: string | string[]
  description?: string
  enum?: unknown[]
  minimum?: number
  properties?: Record<string, SchemaNode>
  required?: string[]
  items?: SchemaNode
  anyOf?: SchemaNode[]
}

export interface FieldHint {
  key: string
  description: string | null
  required: boolean
  /** The value a new field starts with. */
  snippet: string
}

const PROGRAM = (definitionSchema as { properties: { program: SchemaNode } }).properties.program

/** The schema of the value at `path` ('' = the program), or null where the schema says nothing. */
function nodeAt(path: string): SchemaNode | null {
  let node: SchemaNode | undefined = PROGRAM
  for (const m of path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) {
    if (!node) return null
    node = m[2] !== undefined ? node.items : node.properties?.[m[1] as string]
    if (node?.anyOf) node = node.anyOf.find((n) => n.properties) ?? node
  }
  return node ?? null
}

function snippetOf(node: SchemaNode): string {
  if (node.enum && node.enum.length > 0) return JSON.stringify(node.enum[0])
  const type = Array.isArray(node.type) ? node.type[0] : node.type
  switch (type) {
    case 'object':
      return '{}'
    case 'array':
      return '[]'
    case 'boolean':
      return 'true'
    case 'integer':
    case 'number':
      return String(node.minimum ?? 0)
    default:
      return '""'
  }
}

/** The object the cursor is in (its path) and the fields it may still take; null outside any or in bad JSON. */
export function fieldsAt(text: string, cursor: number): { path: string; fields: FieldHint[] } | null {
  try {
    JSON.parse(text)
  } catch {
    return null
  }
  const at = objectAt(jsonPlaces(text), cursor)
  if (!at) return null
  const node = nodeAt(at.path)
  if (!node?.properties) return null
  const written = new Set(at.place.keys ?? [])
  const required = new Set(node.required ?? [])
  const fields = Object.entries(node.properties)
    .filter(([key]) => !written.has(key))
    .map(([key, n]) => ({
      key,
      description: n.description ?? null,
      required: required.has(key),
      snippet: snippetOf(n),
    }))
  return { path: at.path, fields }
}

/**
 * `text` with `"key": snippet` added at `cursor`, commas as needed so it stays
 * JSON, and where the cursor goes next (inside an empty string, or after the value).
 */
export function addField(text: string, cursor: number, field: FieldHint): { text: string; cursor: number } {
  const before = text.slice(0, cursor).trimEnd()
  const after = text.slice(cursor).trimStart()
  const lead = before.endsWith('{') || before.endsWith(',') ? '' : ', '
  const trail = after.startsWith('}') ? '' : ', '
  const member = `"${field.key}": ${field.snippet}`
  const next = text.slice(0, cursor) + lead + member + trail + text.slice(cursor)
  const valueEnd = cursor + lead.length + member.length
  return { text: next, cursor: field.snippet === '""' ? valueEnd - 1 : valueEnd }
}
