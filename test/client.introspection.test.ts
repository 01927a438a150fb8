/**
 * The typed client's schema (src/client/introspection.d.ts) is what
 * schema/schema.graphql says, so the types the console and the CLI are
 * checked against are never stale (run npm run schema:print when this fails).
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { printedSchema } from '../src/api/schemaPrint.ts'
import { INTROSPECTION_FILE, introspectionText } from '../src/client/generate.ts'

describe('the typed client', () => {
  it('has the introspection of the current schema', () => {
    expect(readFileSync(INTROSPECTION_FILE, 'utf8')).toBe(introspectionText(printedSchema()))
  })

  it('notices a field the schema lost', () => {
    const sdl = printedSchema().replace(/^ {2}rehearsal: Boolean!\n/m, '')
    expect(sdl).not.toBe(printedSchema())
    expect(introspectionText(sdl)).not.toBe(introspectionText(printedSchema()))
  })
})
