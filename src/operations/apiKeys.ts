/**
 * Making and revoking API keys. The secret is made here, answered once to the
 * caller and never stored, logged or audited: only its digest reaches the
 * database. Both mutations are audited with the person who made them.
 */
import * as apiKeys from '../../sql/apiKeys.ts'
import * as audit from '../../sql/auditLog.ts'
import type { Db } from '../../sql/db.ts'
import type { Principal, Role } from '../auth.ts'
import { badInput, notFound } from '../errors.ts'
import type { ApiKeyring } from '../identity/keyring.ts'
import { newSecret } from '../identity/keyring.ts'

export interface ApiKeyDeps {
  db: Db
  keyring: ApiKeyring
  now: () => Date
}

export interface CreateApiKeyInput {
  name: string
  role: Role
  teams?: readonly string[] | null
  expiresAt?: Date | null
}

export const MAX_TEAMS = 50
const MAX_NAME = 191
const MAX_TEAM = 100

function validTeams(teams: readonly string[] | null | undefined): string[] {
  const list = [...new Set((teams ?? []).map((t) => t.trim()))]
  if (list.length > MAX_TEAMS) throw badInput(`teams: at most ${MAX_TEAMS} (got ${list.length}).`)
  for (const t of list) {
    if (t === '' || t.length > MAX_TEAM) {
      throw badInput(`teams: each team is 1 to ${MAX_TEAM} characters, without leading or trailing spaces.`)
    }
  }
  return list
}

export async function createApiKey(
  deps: ApiKeyDeps,
  input: CreateApiKeyInput,
  creator: Principal,
): Promise<{ key: apiKeys.ApiKeyRow; secret: string }> {
  const name = input.name.trim()
  if (name === '' || name.length > MAX_NAME) {
    throw badInput(`name: 1 to ${MAX_NAME} characters: the person or service that will hold the key.`)
  }
  const teams = validTeams(input.teams)
  const expiresAt = input.expiresAt ?? null
  if (expiresAt && expiresAt.getTime() <= deps.now().getTime()) {
    throw badInput('expiresAt is in the past: give a future time, or none for a key that does not expire.')
  }
  const { secret, prefix, digest } = newSecret()
  const id = await deps.db.transaction(async (tx) => {
    const newId = await apiKeys.insert(tx, {
      name,
      role: input.role,
      teams,
      prefix,
      digest,
      createdBy: creator.name,
      expiresAt,
    })
    await audit.record(tx, {
      actor: creator.name,
      action: 'createApiKey',
      targetType: 'apiKey',
      targetId: String(newId),
      outcome: 'ok',
      detail: { name, role: input.role, teams, prefix, expiresAt: expiresAt?.toISOString() ?? null },
    })
    return newId
  })
  const key = await apiKeys.byId(deps.db, id)
  if (!key) throw notFound('apiKey', id)
  return { key, secret }
}

/** Revoke a key (idempotent: revoking it again answers it as it is). Refused everywhere within one poll. */
export async function revokeApiKey(deps: ApiKeyDeps, id: number, by: Principal): Promise<apiKeys.ApiKeyRow> {
  const before = await apiKeys.byId(deps.db, id)
  if (!before) throw notFound('apiKey', id)
  await deps.db.transaction(async (tx) => {
    const did = await apiKeys.revoke(tx, id, deps.now())
    if (did) {
      await audit.record(tx, {
        actor: by.name,
        action: 'revokeApiKey',
        targetType: 'apiKey',
        targetId: String(id),
        outcome: 'ok',
        detail: { name: before.name, prefix: before.prefix },
      })
    }
  })
  // Refused on this instance at once, open subscriptions included; others follow at their next poll.
  deps.keyring.revoked(id)
  const after = await apiKeys.byId(deps.db, id)
  if (!after) throw notFound('apiKey', id)
  return after
}
