/**
 * `viewer`: who the token belongs to. User interfaces ask it once at sign-in to
 * learn the role, so they offer only the controls the token may use.
 */

import { builder } from '../schema/builder.ts'
import { requires } from '../src/api/authz.ts'
import { ROLES } from '../src/auth.ts'

const RoleEnum = builder.enumType('Role', {
  description:
    'viewer: queries and subscriptions; operator: viewer + run controls; admin: operator + definitions.',
  values: Object.fromEntries(ROLES.map((r) => [r.toUpperCase(), { value: r }])) as {
    VIEWER: { value: 'viewer' }
    OPERATOR: { value: 'operator' }
    ADMIN: { value: 'admin' }
  },
})

interface ViewerShape {
  role: (typeof ROLES)[number]
  actor: string
}

const ViewerRef = builder.objectRef<ViewerShape>('Viewer').implement({
  description: 'The caller behind this request.',
  fields: (t) => ({
    role: t.field({ type: RoleEnum, resolve: (v) => v.role }),
    actor: t.exposeString('actor', {
      description: 'The name actions are recorded under, e.g. "operator#1a2b3c4d" (never the token).',
    }),
  }),
})

builder.queryFields((t) => ({
  viewer: t.field({
    type: ViewerRef,
    description: 'The role and actor name of the token this request carries.',
    extensions: requires('viewer'),
    // The role check has already refused a request without a principal.
    resolve: (_root, _args, ctx) => ({ role: ctx.principal!.role, actor: ctx.principal!.actor }),
  }),
}))
