/** `ApiKey` and `CreatedApiKey`: keys as an admin sees them; the secret only in the answer that made it. */
import type { ApiKeyRow } from '../sql/apiKeys.ts'
import { builder } from './builder.ts'
import { RoleEnum } from './role.ts'

export const ApiKeyRef = builder.objectRef<ApiKeyRow>('ApiKey').implement({
  description:
    'A credential held by a person or a service. Its secret is never answered again after creation.',
  fields: (t) => ({
    id: t.id({ resolve: (k) => String(k.id) }),
    name: t.exposeString('name', { description: 'Who holds the key: what its actions are recorded under.' }),
    role: t.field({ type: RoleEnum, resolve: (k) => k.role as 'viewer' | 'operator' | 'admin' }),
    teams: t.stringList({ resolve: (k) => k.teams }),
    prefix: t.exposeString('prefix', {
      description: 'The first characters of the secret (e.g. "sr_live_ab12"), to tell keys apart.',
    }),
    createdAt: t.field({ type: 'DateTime', resolve: (k) => k.createdAt }),
    createdBy: t.exposeString('createdBy', { description: 'The name of whoever made the key.' }),
    expiresAt: t.field({ type: 'DateTime', nullable: true, resolve: (k) => k.expiresAt }),
    lastUsedAt: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'When the key was last used, to the minute (recorded at most once a minute).',
      resolve: (k) => k.lastUsedAt,
    }),
    revokedAt: t.field({ type: 'DateTime', nullable: true, resolve: (k) => k.revokedAt }),
  }),
})

export const CreatedApiKeyRef = builder
  .objectRef<{ key: ApiKeyRow; secret: string }>('CreatedApiKey')
  .implement({
    description: 'A new key and its secret. The secret is answered this once and cannot be read again.',
    fields: (t) => ({
      key: t.field({ type: ApiKeyRef, resolve: (c) => c.key }),
      secret: t.exposeString('secret', {
        description: 'The bearer credential: send it as "Authorization: Bearer <secret>". Shown once.',
      }),
    }),
  })
