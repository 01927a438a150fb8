/**
 * Compiled execution (graphql-jit) for queries.
 *
 * A list page is 500 runs × a dozen fields, and graphql-js's interpreter spent
 * more CPU walking that result (and allocating promises per object) than the
 * database did reading it; the compiled query is several times cheaper per
 * request (bench/apiLatency.ts). Resolvers are the schema's own, so the root
 * fields' role checks (authz.ts) run exactly as before.
 *
 * Only where graphql-jit behaves like graphql-js as far as the tests pin it:
 * - queries only: subscriptions and mutations keep graphql-js (the JIT's
 *   subscribe reports errors differently, and mutations are not hot);
 * - variables are coerced by graphql-js first, and an operation whose
 *   variables are invalid is left to graphql-js, whose error carries the
 *   scalar's own message (the JIT answers only "Expected type DateTime.").
 */
import { useGraphQlJit } from '@envelop/graphql-jit'
import { type ExecutionArgs, getOperationAST, getVariableValues } from 'graphql'

function jitApplies(args: ExecutionArgs): boolean {
  const op = getOperationAST(args.document, args.operationName)
  if (op?.operation !== 'query') return false
  const defs = op.variableDefinitions ?? []
  if (defs.length === 0) return true
  const coerced = getVariableValues(args.schema, defs, args.variableValues ?? {}, { maxErrors: 1 })
  return coerced.errors === undefined
}

export function useQueryJit() {
  return useGraphQlJit({}, { enableIf: jitApplies })
}
