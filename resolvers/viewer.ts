/**
 * `viewer`: who the credential belongs to. User interfaces ask it once at
 * sign-in to learn the name and role, so they greet the person and offer only
 * the controls they may use.
 */

import { builder } from '../schema/builder.ts'
import { RoleEnum } from '../schema/role.ts'
import { requires } from '../src/api/authz.ts'
import type { Principal } from '../src/auth.ts'
import { principalOf } from './deps.ts'

const ViewerRef = builder.objectRef<Principal>('Viewer').implement({
  description: 'The caller behind this request.',
  fields: (t) => ({
    role: t.field({ type: RoleEnum, resolve: (v) => v.role }),
    name: t.exposeString('name', {
      description:
        "Who the caller is: an API key's or an SSO user's name, a named bootstrap token's; \"role#hash\" for an unnamed bootstrap token.",
    }),
    teams: t.stringList({
      resolve: (v) => [...v.teams],
      description: 'Teams (from the API key or the identity provider).',
    }),
    actor: t.exposeString('actor', {
      description: 'The name actions are recorded under: the same as `name` (never the token).',
    }),
  }),
})

builder.queryFields((t) => ({
  viewer: t.field({
    type: ViewerRef,
    description: 'The name, teams and role of the caller.',
    extensions: requires('viewer'),
    resolve: (_root, _args, ctx) => principalOf(ctx),
  }),
}))
