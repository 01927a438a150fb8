/**
 * Which executor runs an operation: compiled (graphql-jit) for queries,
 * graphql-js for everything else.
 *
 * Every response map must be ordered as its selection set. yoga's default
 * executor (@graphql-tools/executor, pinned to a release that runs on Node 20)
 * writes an object's keys as their values resolve, so a field with an async
 * resolver (nextOccurrences, currentVersion, a DataLoader) moved behind the
 * synchronous ones: mutations and subscriptions answered out of order while
 * compiled queries did not. graphql-js collects the values first and builds
 * the map in selection order, so mutations, subscriptions and the queries the
 * JIT does not take run on it (the fix upstream needs Node 22).
 *
 * Why compile queries: a list page is 500 runs × a dozen fields, and graphql-js's interpreter spent
 * more CPU walking that result (and allocating promises per object) than the
 * database did reading it; the compiled query is several times cheaper per
 * request (bench/apiLatency.ts), and so is its compiled JSON serialiser.
 * Resolvers are the schema's own, so the root fields' role checks (authz.ts)
 * run exactly as before.
 *
 * Only where graphql-jit behaves like graphql-js as far as the tests pin it:
 * - queries only: subscriptions and mutations keep graphql-js (the JIT's
 *   subscribe reports errors differently, and mutations are not hot);
 *   subscriptions share each event's execution (sharedSubscribe.ts);
 * - variables are coerced by graphql-js first, and an operation whose
 *   variables are invalid is left to graphql-js, whose error carries the
 *   scalar's own message (the JIT answers only "Expected type DateTime.");
 * - a document graphql-jit cannot compile is executed by graphql-js.
 *
 * This is a few lines of our own rather than @envelop/graphql-jit, whose cache
 * is keyed by the document alone: a document holding two operations answered
 * the second with the first one's result, whatever `operationName` said.
 */

import type { DocumentNode, ExecutionArgs, ExecutionResult } from 'graphql'
import { execute, GraphQLError, getOperationAST, getVariableValues } from 'graphql'
import { type CompiledQuery, compileQuery, isCompiledQuery } from 'graphql-jit'
import type { Plugin } from 'graphql-yoga'
import { sharedSubscribe } from './sharedSubscribe.ts'

function jitApplies(args: ExecutionArgs): boolean {
  const op = getOperationAST(args.document, args.operationName)
  if (op?.operation !== 'query') return false
  const defs = op.variableDefinitions ?? []
  if (defs.length === 0) return true
  const coerced = getVariableValues(args.schema, defs, args.variableValues ?? {}, { maxErrors: 1 })
  return coerced.errors === undefined
}

/**
 * graphql-js answers a request it cannot start (invalid variables, an unknown
 * operation) with errors and no `data`. Those are the caller's mistake: mark
 * them HTTP 400, as yoga's own executor does, so the status does not depend on
 * which executor ran.
 */
function executeOnGraphqlJs(args: ExecutionArgs): ReturnType<typeof execute> {
  const result = execute(args)
  if (result instanceof Promise || 'data' in result || !result.errors) return result
  return {
    errors: result.errors.map(
      (e) =>
        new GraphQLError(e.message, {
          nodes: e.nodes,
          source: e.source,
          positions: e.positions,
          path: e.path,
          originalError: e.originalError,
          extensions: { ...e.extensions, http: { ...(e.extensions.http as object), status: 400 } },
        }),
    ),
  }
}

/** Options of {@link useQueryJit}. */
export interface QueryJitOptions {
  /** Told once per document and operation that graphql-jit could not compile (it then runs on graphql-js). */
  onCompileError?: (operationName: string | null, errors: readonly unknown[]) => void
}

export function useQueryJit(opts: QueryJitOptions = {}): Plugin {
  // Per parsed document (yoga caches those), per operation: compiled, or null
  // when graphql-jit refused it. Documents that are dropped take theirs along.
  const compiled = new WeakMap<DocumentNode, Map<string, CompiledQuery | null>>()

  function compiledFor(args: ExecutionArgs): CompiledQuery | null {
    let perDocument = compiled.get(args.document)
    if (!perDocument) {
      perDocument = new Map()
      compiled.set(args.document, perDocument)
    }
    const name = args.operationName ?? ''
    let entry = perDocument.get(name)
    if (entry === undefined) {
      const result = compileQuery(args.schema, args.document, args.operationName ?? undefined)
      if (isCompiledQuery(result)) {
        entry = result
      } else {
        entry = null
        opts.onCompileError?.(args.operationName ?? null, result.errors ?? [])
      }
      perDocument.set(name, entry)
    }
    return entry
  }

  return {
    onExecute({ args, setExecuteFn }) {
      const query = jitApplies(args) ? compiledFor(args) : null
      if (!query) {
        setExecuteFn(executeOnGraphqlJs as Parameters<typeof setExecuteFn>[0])
        return
      }
      setExecuteFn((async (execArgs: ExecutionArgs) => {
        const result = (await query.query(
          execArgs.rootValue,
          execArgs.contextValue,
          execArgs.variableValues,
        )) as ExecutionResult & { stringify?: (r: unknown) => string }
        // yoga serialises with `result.stringify` when there is one: the compiled, faster one.
        result.stringify = query.stringify
        return result
      }) as Parameters<typeof setExecuteFn>[0])
    },
    onSubscribe({ setSubscribeFn }) {
      // graphql-js, with each live-feed event executed once per distinct
      // (document, variables, role) rather than once per subscriber.
      setSubscribeFn(sharedSubscribe as Parameters<typeof setSubscribeFn>[0])
    },
  }
}
