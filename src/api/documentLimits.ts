/**
 * graphql-js parses by recursive descent, so a document that nests lists,
 * input objects or selection sets a few thousand levels deep overflows the
 * stack before any validation rule (the depth limit included) can look at it.
 * That surfaced as "Unexpected error." (the fuzz drill,
 * test/drills/fuzz.drill.test.ts, found it). The nesting is counted on the text
 * first, outside strings and comments, and a deep document is refused as the
 * syntax error it is: HTTP 400, GRAPHQL_PARSE_FAILED.
 */
import { createGraphQLError, type Plugin } from 'graphql-yoga'

/**
 * Deepest bracket nesting (`{`, `[`, `(`) accepted in a document. Selections
 * stop at 10 (the depth limit) and JSON values at 24 levels, so real documents
 * stay far below this.
 */
export const MAX_DOCUMENT_NESTING = 128

/** How deep `{ [ (` nest in a GraphQL document, outside strings and comments; stops counting past `limit`. */
export function documentNesting(source: string, limit = Number.POSITIVE_INFINITY): number {
  let depth = 0
  let max = 0
  const n = source.length
  for (let i = 0; i < n; i++) {
    const c = source.charCodeAt(i)
    if (c === 0x22 /* " */) {
      if (source.startsWith('"""', i)) {
        // Block string: ends at the next """ not escaped as \"""
        i += 3
        while (i < n && !(source.startsWith('"""', i) && source[i - 1] !== '\\')) i++
        i += 2
      } else {
        i++
        while (i < n && source.charCodeAt(i) !== 0x22 && source.charCodeAt(i) !== 0x0a) {
          if (source.charCodeAt(i) === 0x5c /* \ */) i++
          i++
        }
      }
    } else if (c === 0x23 /* # */) {
      while (i < n && source.charCodeAt(i) !== 0x0a && source.charCodeAt(i) !== 0x0d) i++
    } else if (c === 0x7b || c === 0x5b || c === 0x28 /* { [ ( */) {
      depth++
      if (depth > max) {
        max = depth
        if (max > limit) return max
      }
    } else if (c === 0x7d || c === 0x5d || c === 0x29 /* } ] ) */) {
      depth--
    }
  }
  return max
}

/** Refuse documents nested deeper than `max` before graphql-js parses them. */
export function useDocumentNestingLimit(max = MAX_DOCUMENT_NESTING): Plugin {
  return {
    onParse({ params }) {
      const source = params.source
      const body = typeof source === 'string' ? source : source.body
      if (documentNesting(body, max) > max) {
        throw createGraphQLError(`Syntax Error: the document nests brackets more than ${max} levels deep.`, {
          extensions: { code: 'GRAPHQL_PARSE_FAILED', http: { status: 400 } },
        })
      }
    },
  }
}
