/** API keys: list, create (the secret answered once), revoke. All admin. */

import { ApiKeyRef, CreatedApiKeyRef } from '../schema/apiKey.ts'
import { builder } from '../schema/builder.ts'
import { RoleEnum } from '../schema/role.ts'
import * as apiKeys from '../sql/apiKeys.ts'
import { parseId } from '../src/api/args.ts'
import { requires } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import { type ApiKeyDeps, createApiKey, revokeApiKey } from '../src/operations/apiKeys.ts'
import { principalOf } from './deps.ts'

function keyDeps(ctx: ApiContext): ApiKeyDeps {
  const s = ctx.services
  return { db: s.db, keyring: s.authenticator.keyring, now: () => s.clock.now() }
}

builder.queryFields((t) => ({
  apiKeys: t.field({
    type: [ApiKeyRef],
    description: 'API keys, newest first; revoked ones only with includeRevoked.',
    extensions: requires('admin'),
    args: { includeRevoked: t.arg.boolean({ defaultValue: false }) },
    resolve: (_root, args, ctx) =>
      apiKeys.list(ctx.services.db, { includeRevoked: args.includeRevoked === true }),
  }),
}))

builder.mutationFields((t) => ({
  createApiKey: t.field({
    type: CreatedApiKeyRef,
    description:
      'Make a key for a person or service. The secret is in this answer only; the server keeps a digest.',
    extensions: requires('admin'),
    args: {
      name: t.arg.string({ required: true }),
      role: t.arg({ type: RoleEnum, required: true }),
      teams: t.arg.stringList(),
      expiresAt: t.arg({ type: 'DateTime' }),
    },
    resolve: (_root, args, ctx) =>
      createApiKey(
        keyDeps(ctx),
        { name: args.name, role: args.role, teams: args.teams ?? [], expiresAt: args.expiresAt ?? null },
        principalOf(ctx),
      ),
  }),
  revokeApiKey: t.field({
    type: ApiKeyRef,
    description:
      'Revoke a key: refused at once on this instance and within STATUS_POLL_MS on every other; its open subscriptions end.',
    extensions: requires('admin'),
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => revokeApiKey(keyDeps(ctx), parseId(args.id, 'id'), principalOf(ctx)),
  }),
}))
