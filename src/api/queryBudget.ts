/**
 * What one GraphQL document may ask for, judged before it runs.
 *
 * graphql-armor limits depth, aliases and tokens (each a plugin wired in
 * src/server.ts). This module adds the parts no plugin knows about our schema:
 *
 * - **Cost counts what comes back.** A field returning objects costs 1 per
 *   object; scalar fields are free (they come with their row) unless they are
 *   lists sized by an argument. A `limit`, `count` or `first` argument
 *   multiplies the cost of everything under it by the number it asks for; a
 *   list with no such argument is assumed to hold {@link ASSUMED_LIST_SIZE}
 *   items. Root fields that run several statements weigh more
 *   ({@link FIELD_WEIGHTS}).
 * - **Variables count at the value the request sends.** The budget is checked
 *   twice, by one walk ({@link measureOperation}). At validation (cached per
 *   document, so it cannot see variables) a size given as a variable counts as
 *   1, the least it can ask for: only what no variable value could save is
 *   refused there. At execution the selected operation is measured again with
 *   the request's coerced variable values, clamped as the resolvers clamp them
 *   (an absent or null value takes the argument's default), and refused before
 *   any resolver runs if it is over budget. A variable's default in the
 *   document counts only when the request leaves the variable out.
 * - **Introspection costs like anything else**: `__schema` weighs
 *   {@link SCHEMA_INTROSPECTION_COST}, `__type` {@link TYPE_INTROSPECTION_COST},
 *   at most one `__schema` per operation, and no path inside introspection may
 *   nest more than {@link MAX_INTROSPECTION_LIST_NESTING} list fields (the
 *   standard introspection query nests three: types → fields → args; a
 *   hostile one nests `fields { type { fields { … } } }` to multiply the
 *   answer).
 * - **Occurrences**: the `count` of every `nextOccurrences` in the document,
 *   each multiplied by the sizes of the lists around it that the document
 *   itself fixes, summed, may not pass the occurrence cap. (How many
 *   definitions a `definitions` list holds is not known here; the resolver
 *   keeps a running total per request for that, see
 *   {@link takeOccurrences}.)
 *
 * A refused document or request is answered like a validation error: HTTP 400,
 * code GRAPHQL_VALIDATION_FAILED, a message naming the limit and the
 * configuration variable that raises it, no `data`.
 */
import {
  type DocumentNode,
  type ExecutionResult,
  type FieldNode,
  type FragmentDefinitionNode,
  GraphQLError,
  type GraphQLField,
  type GraphQLNamedType,
  type GraphQLSchema,
  getNamedType,
  getNullableType,
  getOperationAST,
  getVariableValues,
  isCompositeType,
  isInterfaceType,
  isListType,
  isObjectType,
  Kind,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValidationContext,
  type ValueNode,
} from 'graphql'
import type { Plugin } from 'graphql-yoga'
import { AppError, ERROR_CODES } from '../errors.ts'
import { PROGRAM_LIMITS } from '../runner/program.ts'
import {
  type AnswerBounds,
  estimateFieldBytes,
  estimateRefusal,
  OBJECT_BYTES,
  SCALAR_BYTES,
  SCHEMA_INTROSPECTION_BYTES,
  TYPE_INTROSPECTION_BYTES,
} from './answerSize.ts'
import { API_CODES, refusalWithHttp } from './errors.ts'
import { repeatedFields } from './repeatedFields.ts'

/** Items a list without a size argument is assumed to hold, unless {@link LIST_BOUNDS} knows better. */
export const ASSUMED_LIST_SIZE = 10
/**
 * Lists without a size argument whose real bound is known. A run has as many
 * steps as its program, up to the program limit; a page's `nodes` are already
 * counted by the page's `first`, and an inbox change's cues by its `limit`;
 * a backfill makes at most 1,000 runs.
 */
export const LIST_BOUNDS: Readonly<Record<string, number>> = {
  'EventRun.steps': PROGRAM_LIMITS.maxSteps,
  'RunPage.nodes': 1,
  'WaitingStepsChange.added': 1,
  'WaitingStepsChange.removed': 1,
  'BackfillResult.runs': 1000,
}
/** Arguments that size the list a field returns, and the most the server ever returns for each. */
export const SIZE_ARGUMENTS: Readonly<Record<string, number>> = { limit: 500, first: 500, count: 1000 }
/** Fields that cost more than the objects they return (several statements each). */
export const FIELD_WEIGHTS: Readonly<Record<string, number>> = { 'Query.health': 20 }
export const SCHEMA_INTROSPECTION_COST = 500
export const TYPE_INTROSPECTION_COST = 20
export const MAX_SCHEMA_INTROSPECTIONS = 1
export const MAX_INTROSPECTION_LIST_NESTING = 3
/**
 * Fields visited per operation once fragments are spread. Fragments spreading
 * fragments many times each expand exponentially; past this the document is
 * refused without walking the rest.
 */
export const MAX_EXPANDED_FIELDS = 5000
/** The field whose `count` is capped per request. */
const OCCURRENCES_FIELD = 'nextOccurrences'

export interface QueryBudget extends AnswerBounds {
  /** Largest cost accepted (MAX_QUERY_COST). */
  maxCost: number
  /** Most schedule occurrences one request may compute (MAX_OCCURRENCES_PER_REQUEST). */
  maxOccurrences: number
}

/** What {@link measureOperation} found in one operation. */
export interface OperationMeasure {
  cost: number
  /** Estimated bytes of the answer (src/api/answerSize.ts). */
  bytes: number
  occurrences: number
  schemaIntrospections: number
  /** Deepest nesting of list fields on one path inside introspection. */
  introspectionListNesting: number
}

function refusal(message: string): GraphQLError {
  return new GraphQLError(message, { extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED } })
}

/**
 * A refusal at execution time. Yoga answers a result set before execution with
 * HTTP 200 unless an error's `extensions.http.status` asks for another.
 */
function executionRefusal(message: string): GraphQLError {
  return refusalWithHttp(message, API_CODES.GRAPHQL_VALIDATION_FAILED, { status: 400 })
}

interface Walk {
  schema: GraphQLSchema
  fragments: Record<string, FragmentDefinitionNode>
  /** The request's coerced variable values; undefined at validation, where each size variable counts as 1. */
  variableValues: Readonly<Record<string, unknown>> | undefined
  bounds: AnswerBounds
  measure: OperationMeasure
  /** Fragments on the current path: a cycle is another rule's error, not a reason to loop. */
  path: Set<string>
  visits: number
}

/** Thrown out of the walk when the document expands past {@link MAX_EXPANDED_FIELDS}. */
class TooLarge extends Error {}

function intValue(node: ValueNode | undefined): number | undefined {
  return node?.kind === Kind.INT ? Number(node.value) : undefined
}

/** The number a size argument asks for, as the server will clamp it; undefined without one. */
function sizeOf(field: FieldNode, def: GraphQLField<unknown, unknown>, walk: Walk): number | undefined {
  for (const arg of def.args) {
    const max = SIZE_ARGUMENTS[arg.name]
    if (max === undefined) continue
    const given = field.arguments?.find((a) => a.name.value === arg.name)?.value
    const argDefault = typeof arg.defaultValue === 'number' ? arg.defaultValue : undefined
    let n: number | undefined
    if (given === undefined) n = argDefault
    else if (given.kind === Kind.VARIABLE) {
      if (walk.variableValues === undefined) {
        // Validation: the value is unknown (and the result is cached for every request); the least it can be.
        n = 1
      } else {
        // Execution: coerced values already hold the variable's default; absent or null → the argument's default.
        const value = walk.variableValues[given.name.value]
        n = typeof value === 'number' ? value : argDefault
      }
    } else n = intValue(given) ?? argDefault
    if (n !== undefined) return Math.min(Math.max(Math.trunc(n), 1), max)
  }
  return undefined
}

/** What a selection weighs: its cost, and an estimate of its answer's bytes (src/api/answerSize.ts). */
interface Weight {
  cost: number
  bytes: number
}

/**
 * Weight of a selection set on `type`. `multiplier` is how many times the
 * enclosing lists whose size the document fixes repeat it (for occurrences).
 */
function selectionCost(
  selections: SelectionSetNode,
  type: GraphQLNamedType,
  walk: Walk,
  multiplier: number,
): Weight {
  const total: Weight = { cost: 0, bytes: OBJECT_BYTES }
  const add = (w: Weight) => {
    total.cost += w.cost
    total.bytes += w.bytes
  }
  for (const sel of selections.selections) {
    if (sel.kind === Kind.FIELD) {
      if (++walk.visits > MAX_EXPANDED_FIELDS) throw new TooLarge()
      add(fieldCost(sel, type, walk, multiplier))
    } else if (sel.kind === Kind.INLINE_FRAGMENT) {
      const on = sel.typeCondition ? walk.schema.getType(sel.typeCondition.name.value) : type
      if (on) add(selectionCost(sel.selectionSet, on, walk, multiplier))
    } else {
      const name = sel.name.value
      const fragment = walk.fragments[name]
      if (!fragment || walk.path.has(name)) continue
      walk.path.add(name)
      add(selectionCost(fragment.selectionSet, type, walk, multiplier))
      walk.path.delete(name)
    }
  }
  return total
}

function fieldCost(field: FieldNode, parent: GraphQLNamedType, walk: Walk, multiplier: number): Weight {
  const name = field.name.value
  const responseName = field.alias?.value ?? name
  if (name === '__typename') return { cost: 0, bytes: responseName.length + SCALAR_BYTES }
  if (name === '__schema' || name === '__type') {
    if (name === '__schema') walk.measure.schemaIntrospections++
    if (field.selectionSet) introspectionNesting(field.selectionSet, walk, 0)
    return name === '__schema'
      ? { cost: SCHEMA_INTROSPECTION_COST, bytes: SCHEMA_INTROSPECTION_BYTES }
      : { cost: TYPE_INTROSPECTION_COST, bytes: TYPE_INTROSPECTION_BYTES }
  }
  if (!(isObjectType(parent) || isInterfaceType(parent))) return { cost: 0, bytes: 0 }
  const def = parent.getFields()[name]
  // An unknown field is FieldsOnCorrectType's error; it costs nothing here.
  if (!def) return { cost: 0, bytes: 0 }
  const coordinate = `${parent.name}.${name}`
  const returned = getNullableType(def.type)
  const isList = isListType(returned)
  const named = getNamedType(def.type)
  const size = sizeOf(field, def, walk)
  const items = size ?? (isList ? (LIST_BOUNDS[coordinate] ?? ASSUMED_LIST_SIZE) : 1)
  if (name === OCCURRENCES_FIELD) walk.measure.occurrences += multiplier * (size ?? 1)
  const weight = FIELD_WEIGHTS[coordinate] ?? 1
  if (!isCompositeType(named) || !field.selectionSet) {
    // Scalars come with their row, unless the field computes a sized list of them.
    const bytes = estimateFieldBytes(coordinate, responseName, walk.bounds)
    return size !== undefined && isList
      ? { cost: items, bytes: items * bytes }
      : { cost: weight - 1, bytes: isList ? items * bytes : bytes }
  }
  const inner = selectionCost(field.selectionSet, named, walk, multiplier * (size ?? 1))
  return {
    cost: items * (weight + inner.cost),
    bytes: responseName.length + 4 + (isList ? items * (inner.bytes + 1) : inner.bytes),
  }
}

/** Walk an introspection selection, recording the deepest nesting of list fields. */
const INTROSPECTION_LISTS = new Set([
  'types',
  'fields',
  'args',
  'inputFields',
  'interfaces',
  'possibleTypes',
  'enumValues',
  'directives',
])

function introspectionNesting(selections: SelectionSetNode, walk: Walk, depth: number): void {
  for (const sel of selections.selections) {
    if (sel.kind === Kind.FIELD) {
      if (++walk.visits > MAX_EXPANDED_FIELDS) throw new TooLarge()
      if (!sel.selectionSet) continue
      const d = INTROSPECTION_LISTS.has(sel.name.value) ? depth + 1 : depth
      if (d > walk.measure.introspectionListNesting) walk.measure.introspectionListNesting = d
      // Past the limit nothing more needs counting, and a hostile document stops costing time here.
      if (d > MAX_INTROSPECTION_LIST_NESTING) return
      introspectionNesting(sel.selectionSet, walk, d)
    } else if (sel.kind === Kind.INLINE_FRAGMENT) {
      introspectionNesting(sel.selectionSet, walk, depth)
    } else {
      const name = sel.name.value
      const fragment = walk.fragments[name]
      if (!fragment || walk.path.has(name)) continue
      walk.path.add(name)
      introspectionNesting(fragment.selectionSet, walk, depth)
      walk.path.delete(name)
    }
  }
}

/**
 * Measure one operation of `document` against `schema`; null when it expands
 * past {@link MAX_EXPANDED_FIELDS} fields. Without `variableValues` (at
 * validation) a size argument given as a variable counts as 1; with them (the
 * request's coerced values, at execution) it counts at the value sent.
 */
export function measureOperation(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variableValues: Readonly<Record<string, unknown>> | undefined,
  bounds: AnswerBounds,
): OperationMeasure | null {
  const fragments: Record<string, FragmentDefinitionNode> = {}
  for (const d of document.definitions) {
    if (d.kind === Kind.FRAGMENT_DEFINITION) fragments[d.name.value] = d
  }
  const walk: Walk = {
    schema,
    fragments,
    variableValues,
    bounds,
    measure: { cost: 0, bytes: 0, occurrences: 0, schemaIntrospections: 0, introspectionListNesting: 0 },
    path: new Set(),
    visits: 0,
  }
  const root = schema.getRootType(operation.operation)
  try {
    if (root) {
      const w = selectionCost(operation.selectionSet, root, walk, 1)
      walk.measure.cost = w.cost
      walk.measure.bytes = w.bytes
    }
  } catch (err) {
    if (err instanceof TooLarge) return null
    throw err
  }
  return walk.measure
}

/**
 * The limits `m` breaks, as messages; `withVariables` says the request's
 * variable values were counted (execution), so the message can say so.
 */
export function budgetViolations(
  m: OperationMeasure | null,
  budget: QueryBudget,
  withVariables = false,
): GraphQLError[] {
  const error = withVariables ? executionRefusal : refusal
  if (m === null) {
    return [
      error(
        `Query size limit: once its fragments are spread this operation selects more than ${MAX_EXPANDED_FIELDS} fields.`,
      ),
    ]
  }
  const asSent = withVariables ? ' with the variables sent' : ''
  const messages: string[] = []
  if (m.schemaIntrospections > MAX_SCHEMA_INTROSPECTIONS) {
    messages.push(
      `Introspection limit: at most ${MAX_SCHEMA_INTROSPECTIONS} __schema per operation; this one asks for ${m.schemaIntrospections}.`,
    )
  }
  if (m.introspectionListNesting > MAX_INTROSPECTION_LIST_NESTING) {
    messages.push(
      `Introspection limit: list fields (types, fields, args, …) may nest at most ${MAX_INTROSPECTION_LIST_NESTING} deep inside __schema or __type.`,
    )
  }
  if (m.occurrences > budget.maxOccurrences) {
    messages.push(
      `Occurrence limit: this operation asks for ${m.occurrences} schedule occurrences in all${asSent} (nextOccurrences counts, summed over aliases); at most ${budget.maxOccurrences} (MAX_OCCURRENCES_PER_REQUEST).`,
    )
  }
  if (m.cost > budget.maxCost) {
    messages.push(
      `Query cost limit: this operation costs ${m.cost}${asSent}; at most ${budget.maxCost} (MAX_QUERY_COST). Ask for fewer items (limit/first/count) or fewer nested lists.`,
    )
  }
  const errors = messages.map(error)
  if (m.bytes > budget.maxAnswerBytes) {
    errors.push(estimateRefusal(m.bytes, budget.maxAnswerBytes, asSent, withVariables ? 400 : undefined))
  }
  return errors
}

/** The validation rule: refuse an operation over any part of the budget that the document itself fixes. */
export function queryBudgetRule(budget: QueryBudget) {
  return (context: ValidationContext) => ({
    OperationDefinition(operation: OperationDefinitionNode) {
      const m = measureOperation(context.getSchema(), context.getDocument(), operation, undefined, budget)
      for (const error of budgetViolations(m, budget)) context.reportError(error)
      return false
    },
  })
}

/**
 * The execution-time check: the operation a request selects, measured with
 * the variable values it sends. Undefined when the request is within budget,
 * or when execution will refuse it anyway (no such operation, variables that
 * do not coerce) with its own error and without running a resolver.
 */
export function executionRefusals(
  args: {
    schema: GraphQLSchema
    document: DocumentNode
    operationName?: string | null
    variableValues?: Readonly<Record<string, unknown>> | null
  },
  budget: QueryBudget,
): ExecutionResult | undefined {
  const operation = getOperationAST(args.document, args.operationName)
  // Without variables the validation-time measure was already exact.
  if (!operation?.variableDefinitions?.length) return undefined
  const coerced = getVariableValues(args.schema, operation.variableDefinitions, args.variableValues ?? {}, {
    maxErrors: 1,
  })
  if (coerced.errors) return undefined
  const m = measureOperation(args.schema, args.document, operation, coerced.coerced, budget)
  const errors = budgetViolations(m, budget, true)
  return errors.length > 0 ? { errors } : undefined
}

/**
 * Yoga plugin adding {@link queryBudgetRule} to validation and
 * {@link executionRefusals} before execution and subscription (HTTP, SSE and
 * WebSocket alike). Repeated fields are checked first, on their own: such a
 * document never reaches the standard rules, one of which costs time
 * quadratic in them.
 */
export function useQueryBudget(budget: QueryBudget): Plugin {
  return {
    onValidate({ params, setResult, addValidationRule }) {
      const errors = repeatedFields(params.documentAST)
      if (errors.length > 0) setResult(errors)
      else addValidationRule(queryBudgetRule(budget))
    },
    onExecute({ args, setResultAndStopExecution }) {
      const refused = executionRefusals(args, budget)
      if (refused) setResultAndStopExecution(refused)
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const refused = executionRefusals(args, budget)
      if (refused) setResultAndStopExecution(refused)
    },
  }
}

/**
 * Take `n` occurrences from this request's allowance (the running total for
 * lists whose size the document does not fix, such as `definitions`).
 * @throws {AppError} BAD_USER_INPUT once the request has used its allowance.
 */
export function takeOccurrences(allowance: { occurrencesLeft: number }, n: number, max: number): void {
  if (n > allowance.occurrencesLeft) {
    throw new AppError(
      ERROR_CODES.BAD_USER_INPUT,
      `Occurrence limit: this request has computed as many schedule occurrences as one request may (${max}, MAX_OCCURRENCES_PER_REQUEST). Ask for fewer, or for fewer definitions at once.`,
    )
  }
  allowance.occurrencesLeft -= n
}
