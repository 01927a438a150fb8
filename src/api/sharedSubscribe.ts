/**
 * Subscriptions whose events are executed once per distinct (document,
 * operation, variables, role) and fanned out, instead of once per subscriber.
 *
 * The live feeds (runChangeFeed.ts, inboxFeed.ts) hand every subscriber of a
 * change the same event object. graphql-js's `subscribe` executes the
 * subscriber's selection on each event it receives: forty dashboards watching
 * `runChanges` with the same document executed it forty times per change, and
 * at the top of the hour (thousands of changes a second) that interpretation
 * was the API's largest cost on the one event loop it shares with the runner.
 *
 * Here the result of executing an event is kept beside the event (a WeakMap,
 * so it goes when the event does) under a key of what decides it: the parsed
 * document (yoga caches documents by their text, so equal texts are the same
 * object), the operation's name, the coerced variables and the caller's role.
 * What a field shows depends on the role and never on who holds it (roles
 * decide what one may do and what is redacted, never which rows one sees), so
 * subscribers with equal keys get equal results. An event that is not an
 * object (nothing to key it by) is executed per subscriber, as before.
 */
import {
  createSourceEventStream,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  execute,
} from 'graphql'
import type { ApiContext } from './context.ts'

type Executed = ReturnType<typeof execute>

/** Per event: the results already executed for it, by key. */
const executedFor = new WeakMap<object, Map<string, Executed>>()
/** A number per parsed document, so keys stay short. */
const documentIds = new WeakMap<DocumentNode, number>()
let nextDocumentId = 1

/** Executions this process skipped because another subscriber's result was shared (for tests and metrics). */
export const sharedExecutions = { executed: 0, shared: 0 }

function documentId(document: DocumentNode): number {
  let id = documentIds.get(document)
  if (id === undefined) {
    id = nextDocumentId++
    documentIds.set(document, id)
  }
  return id
}

function sharingKey(args: ExecutionArgs): string {
  const role = (args.contextValue as ApiContext | undefined)?.principal?.role ?? ''
  return `${documentId(args.document)}|${args.operationName ?? ''}|${role}|${JSON.stringify(args.variableValues ?? {})}`
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as AsyncIterable<unknown>)?.[Symbol.asyncIterator] === 'function'
}

function executeEvent(args: ExecutionArgs, key: string, event: unknown): Executed {
  if (event === null || typeof event !== 'object') {
    sharedExecutions.executed++
    return execute({ ...args, rootValue: event })
  }
  let results = executedFor.get(event)
  if (!results) {
    results = new Map()
    executedFor.set(event, results)
  }
  const known = results.get(key)
  if (known !== undefined) {
    sharedExecutions.shared++
    return known
  }
  sharedExecutions.executed++
  const result = execute({ ...args, rootValue: event })
  results.set(key, result)
  return result
}

/** The stream of `source` with each event executed through {@link executeEvent}. */
function mapEvents(
  source: AsyncIterable<unknown>,
  args: ExecutionArgs,
  key: string,
): AsyncIterableIterator<ExecutionResult> {
  const iterator = source[Symbol.asyncIterator]()
  return {
    [Symbol.asyncIterator]() {
      return this
    },
    async next() {
      const step = await iterator.next()
      if (step.done) return { done: true, value: undefined }
      return { done: false, value: await executeEvent(args, key, step.value) }
    },
    async return() {
      await iterator.return?.()
      return { done: true, value: undefined }
    },
    async throw(error: unknown) {
      if (iterator.throw) await iterator.throw(error)
      throw error
    },
  }
}

/** graphql-js's `subscribe`, with each event's execution shared by subscribers of equal keys. */
export async function sharedSubscribe(
  args: ExecutionArgs,
): Promise<AsyncIterableIterator<ExecutionResult> | ExecutionResult> {
  const source = await createSourceEventStream(args)
  if (!isAsyncIterable(source)) return source as ExecutionResult
  return mapEvents(source, args, sharingKey(args))
}
