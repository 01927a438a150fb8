/**
 * Look-ahead into a field's selection: lets a list resolver read, in one
 * statement, what every item will ask for anyway.
 */
import { type GraphQLResolveInfo, Kind, type SelectionSetNode } from 'graphql'

/**
 * Whether the items of the field being resolved select `name`, directly or
 * through a fragment. `@skip`/`@include` are not evaluated: a field they may
 * drop counts as selected, which costs at most a read nobody uses.
 */
export function selectsField(info: GraphQLResolveInfo, name: string): boolean {
  const seen = new Set<string>()
  const visit = (set: SelectionSetNode | undefined): boolean => {
    for (const sel of set?.selections ?? []) {
      if (sel.kind === Kind.FIELD) {
        if (sel.name.value === name) return true
      } else if (sel.kind === Kind.INLINE_FRAGMENT) {
        if (visit(sel.selectionSet)) return true
      } else if (!seen.has(sel.name.value)) {
        seen.add(sel.name.value)
        if (visit(info.fragments[sel.name.value]?.selectionSet)) return true
      }
    }
    return false
  }
  return info.fieldNodes.some((node) => visit(node.selectionSet))
}
