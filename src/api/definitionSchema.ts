/**
 * `GET /schema/definition.json`: the JSON Schema of a manifest, for editors
 * (YAML language servers, VS Code). Public like the console page: it describes
 * a file format and holds no data.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { definitionJsonSchema } from '../operations/manifest.ts'

export const DEFINITION_SCHEMA_PATH = '/schema/definition.json'

let text: string | null = null

/** The schema as committed in schema/definition.schema.json. */
export function definitionSchemaText(): string {
  text ??= `${JSON.stringify(definitionJsonSchema(), null, 2)}\n`
  return text
}

export function serveDefinitionSchema(req: IncomingMessage, res: ServerResponse): void {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' })
    res.end('Use GET.\n')
    return
  }
  const body = definitionSchemaText()
  res.writeHead(200, {
    'content-type': 'application/schema+json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'public, max-age=300',
  })
  res.end(req.method === 'HEAD' ? undefined : body)
}
