/**
 * The repeated-field check the query budget runs before graphql-js's own
 * validation rules: one of them (OverlappingFieldsCanBeMerged) is quadratic in
 * the fields of one response name, so such a document must never reach it.
 */
import {
  BREAK,
  type DocumentNode,
  type FragmentDefinitionNode,
  GraphQLError,
  Kind,
  type SelectionSetNode,
  visit,
} from 'graphql'
import { API_CODES } from './errors.ts'

/**
 * How often one selection set may select the same response name. graphql-js's
 * OverlappingFieldsCanBeMerged compares every pair of same-named fields, so
 * `{ definitions { id id id … } }` (a couple of thousand times, within the
 * token limit) costs a second of CPU in validation alone.
 */
export const MAX_REPEATED_FIELD = 20

/** Fields selecting one response name more than {@link MAX_REPEATED_FIELD} times in one selection set. */
export function repeatedFields(document: DocumentNode): GraphQLError[] {
  const fragments = new Map<string, FragmentDefinitionNode>()
  for (const d of document.definitions) {
    if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d)
  }
  const errors: GraphQLError[] = []
  const countInto = (set: SelectionSetNode, counts: Map<string, number>, spreadDepth: number) => {
    for (const sel of set.selections) {
      if (sel.kind === Kind.FIELD) {
        const name = sel.alias?.value ?? sel.name.value
        counts.set(name, (counts.get(name) ?? 0) + 1)
      } else if (spreadDepth < 2) {
        const inner =
          sel.kind === Kind.INLINE_FRAGMENT ? sel.selectionSet : fragments.get(sel.name.value)?.selectionSet
        if (inner) countInto(inner, counts, spreadDepth + 1)
      }
    }
  }
  visit(document, {
    SelectionSet(set) {
      if (errors.length > 0) return BREAK
      const counts = new Map<string, number>()
      countInto(set, counts, 0)
      for (const [name, n] of counts) {
        if (n > MAX_REPEATED_FIELD) {
          errors.push(
            new GraphQLError(
              `Repeated field limit: "${name.slice(0, 40)}" is selected ${n} times in one selection set; at most ${MAX_REPEATED_FIELD}.`,
              { extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED } },
            ),
          )
          return BREAK
        }
      }
      return undefined
    },
  })
  return errors
}
