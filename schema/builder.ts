/**
 * The one Pothos builder. Every type in `schema/` and every root field in
 * `resolvers/` registers on it; src/api/schema.ts imports both indexes and builds.
 *
 * Output fields are non-null unless marked `nullable: true`, and arguments and
 * input fields are optional unless `required: true`, which is how the contract (docs/contract.md) reads.
 */
import SchemaBuilder from '@pothos/core'
import type { ApiContext } from '../src/api/context.ts'

export type ScalarShapes = {
  /** ISO-8601 in UTC with a `Z` on the way out; any ISO-8601 date-time with a zone on the way in. */
  DateTime: { Input: Date; Output: Date }
  /** Any JSON value. */
  JSON: { Input: unknown; Output: unknown }
  /** Numeric database ids, sent as strings; validated by `parseId` in resolvers. */
  ID: { Input: string; Output: string | number }
}

export const builder = new SchemaBuilder<{
  Context: ApiContext
  Scalars: ScalarShapes
  DefaultFieldNullability: false
}>({
  // The contract writes `!` on most output fields: make non-null the default and mark the rest.
  defaultFieldNullability: false,
})

builder.queryType({ description: 'Read runs, steps, definitions and health. Needs the viewer role.' })
builder.mutationType({
  description: 'Run controls (operator role) and definition management (admin role).',
})
builder.subscriptionType({ description: 'Live updates. Needs the viewer role.' })
