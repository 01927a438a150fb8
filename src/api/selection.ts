/**
 * Look-ahead into a field's selection: lets a list resolver read, in one
 * statement, what every item will ask for anyway.
 */
import {
  type FieldNode,
  type FragmentSpreadNode,
  GraphQLIncludeDirective,
  type GraphQLResolveInfo,
  GraphQLSkipDirective,
  getDirectiveValues,
  type InlineFragmentNode,
  Kind,
  type SelectionSetNode,
} from 'graphql'

/**
 * Whether the items of the field being resolved select `name`, directly or
 * through a fragment, once `@skip` and `@include` are applied with the
 * request's variables (as execution applies them). Type conditions are not
 * checked: every fragment here is on the list's own item type.
 */
export function selectsField(info: GraphQLResolveInfo, name: string): boolean {
  const seen = new Set<string>()
  const included = (node: FieldNode | FragmentSpreadNode | InlineFragmentNode): boolean => {
    // Validation has already checked the directives' arguments, so these do not throw.
    if (getDirectiveValues(GraphQLSkipDirective, node, info.variableValues)?.if === true) return false
    return getDirectiveValues(GraphQLIncludeDirective, node, info.variableValues)?.if !== false
  }
  const visit = (set: SelectionSetNode | undefined): boolean => {
    for (const sel of set?.selections ?? []) {
      if (!included(sel)) continue
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
