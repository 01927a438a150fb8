/**
 * The typed `graphql()` tag shared by the console and the CLI: each document's
 * result and variables are derived from schema/schema.graphql (through the
 * generated src/client/introspection.d.ts), so a document selecting a field the
 * schema lacks fails `npm run typecheck`, in the console and in the CLI alike.
 */
import { initGraphQLTada } from 'gql.tada'
import type { introspection } from './introspection.d.ts'

export const graphql = initGraphQLTada<{
  introspection: introspection
  // Fragments are read in place (no masking): a spread's fields are part of the result type.
  disableMasking: true
  scalars: {
    /** ISO-8601, always answered in UTC with a Z. */
    DateTime: string
    JSON: unknown
    ID: string
  }
}>()

export type { FragmentOf, ResultOf, TadaDocumentNode, VariablesOf } from 'gql.tada'
