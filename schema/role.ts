/** The `Role` enum, shared by `Viewer` and `ApiKey`. */
import { ROLES } from '../src/auth.ts'
import { builder } from './builder.ts'

export const RoleEnum = builder.enumType('Role', {
  description:
    'viewer: queries and subscriptions; operator: viewer + run controls; admin: operator + definitions.',
  values: Object.fromEntries(ROLES.map((r) => [r.toUpperCase(), { value: r }])) as {
    VIEWER: { value: 'viewer' }
    OPERATOR: { value: 'operator' }
    ADMIN: { value: 'admin' }
  },
})
