/**
 * The API key cache on its own, against the real database: a known key costs
 * no statement per use, a revoked or expired one is remembered as dead (a
 * client retrying it costs no statement either), and lastUsedAt is written
 * once per minute per key, not per use.
 */
import { afterEach, expect, it } from 'vitest'
import * as apiKeys from '../sql/apiKeys.ts'
import { tokenEntry } from '../src/auth.ts'
import { ApiKeyring } from '../src/identity/keyring.ts'
import { createApiKey, revokeApiKey } from '../src/operations/apiKeys.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb()
const admin = tokenEntry('admin', 'admin-token-0123456789abcdef', 'Test Admin')
let ring: ApiKeyring | null = null
afterEach(async () => {
  await ring?.close()
})

function newRing(pollMs = 30) {
  ring = new ApiKeyring({ db: t.db, pollMs })
  return ring
}

/** Waits (3 s at most) until `ends` holds `count` listener calls. */
async function untilEnds(ends: string[], count: number): Promise<void> {
  const deadline = Date.now() + 3000
  while (ends.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
}

it('answers a known key from the cache, and a revoked one from memory, without statements', async () => {
  const keys = newRing()
  const deps = { db: t.db, keyring: keys, now: () => new Date() }
  const { key, secret } = await createApiKey(deps, { name: 'cached', role: 'viewer' }, admin)
  expect(await keys.authenticate(secret)).toMatchObject({ name: 'cached', role: 'viewer', keyId: key.id })
  const before = t.db.stats.statements
  for (let i = 0; i < 10; i++) await keys.authenticate(secret)
  expect(t.db.stats.statements).toBe(before)

  await revokeApiKey(deps, key.id, admin)
  expect(await keys.authenticate(secret)).toBe('revoked')
  const afterRevoke = t.db.stats.statements
  for (let i = 0; i < 10; i++) expect(await keys.authenticate(secret)).toBe('revoked')
  expect(t.db.stats.statements).toBe(afterRevoke)
  // Another instance that never saw the key looks it up once, then remembers.
  const other = new ApiKeyring({ db: t.db, pollMs: 30 })
  try {
    const s0 = t.db.stats.statements
    expect(await other.authenticate(secret)).toBe('revoked')
    expect(await other.authenticate(secret)).toBe('revoked')
    expect(t.db.stats.statements - s0).toBe(1)
  } finally {
    await other.close()
  }
})

it('writes lastUsedAt once for many uses, and an unknown secret is just unknown', async () => {
  const keys = newRing()
  const deps = { db: t.db, keyring: keys, now: () => new Date() }
  const { key, secret } = await createApiKey(deps, { name: 'used', role: 'operator' }, admin)
  for (let i = 0; i < 50; i++) await keys.authenticate(secret)
  const deadline = Date.now() + 3000
  let row = await apiKeys.byId(t.db, key.id)
  while (!row?.lastUsedAt && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20))
    row = await apiKeys.byId(t.db, key.id)
  }
  expect(row?.lastUsedAt).toBeInstanceOf(Date)
  const first = row?.lastUsedAt?.getTime()
  for (let i = 0; i < 50; i++) await keys.authenticate(secret)
  await new Promise((r) => setTimeout(r, 200))
  expect((await apiKeys.byId(t.db, key.id))?.lastUsedAt?.getTime()).toBe(first)
  expect(await keys.authenticate(`sr_live_${'x'.repeat(43)}`)).toBe('unknown')
})

it('tells a listener whether its key was revoked or expired', async () => {
  const keys = newRing()
  const deps = { db: t.db, keyring: keys, now: () => new Date() }
  const soon = await createApiKey(
    deps,
    { name: 'soon', role: 'viewer', expiresAt: new Date(Date.now() + 300) },
    admin,
  )
  const later = await createApiKey(deps, { name: 'later', role: 'viewer' }, admin)
  const ends: string[] = []
  keys.onRefused(soon.key.id, soon.key.expiresAt, (why) => ends.push(`soon:${why}`))
  keys.onRefused(later.key.id, null, (why) => ends.push(`later:${why}`))
  // Revoked elsewhere (straight in the table): seen by the poll.
  await apiKeys.revoke(t.db, later.key.id, new Date())
  await untilEnds(ends, 2)
  expect(ends.sort()).toEqual(['later:revoked', 'soon:expired'])
})

it('tells a listener that does not know the expiry that its key expired, not that it was revoked', async () => {
  // The listener passes no expiry, and the key was never used through this ring (not
  // cached): only the poll can tell, from the row. Before, the poll said 'revoked'.
  const keys = newRing()
  const deps = { db: t.db, keyring: keys, now: () => new Date() }
  const soon = await createApiKey(
    deps,
    { name: 'unwatched-expiry', role: 'viewer', expiresAt: new Date(Date.now() + 150) },
    admin,
  )
  const ends: string[] = []
  keys.onRefused(soon.key.id, null, (why) => ends.push(why))
  await untilEnds(ends, 1)
  expect(ends).toEqual(['expired'])
})

it('says for each refused key whether it was revoked or expired, whichever came first', async () => {
  const now = new Date()
  const at = (ms: number) => new Date(now.getTime() + ms)
  const key = async (name: string, expiresAt: Date | null) =>
    apiKeys.insert(t.db, {
      name,
      role: 'viewer',
      teams: [],
      prefix: name.slice(0, 8),
      digest: Buffer.from(name.padEnd(32, '.')),
      createdBy: 'test',
      expiresAt,
    })
  const alive = await key('alive', null)
  const aliveUntilLater = await key('later', at(60_000))
  const revoked = await key('revoked', at(60_000))
  const expired = await key('expired', at(-60_000))
  const revokedThenExpired = await key('rev-then-exp', at(-60_000))
  const expiredThenRevoked = await key('exp-then-rev', at(-60_000))
  const gone = await key('gone', null)
  await apiKeys.revoke(t.db, revoked, at(-1000))
  await apiKeys.revoke(t.db, revokedThenExpired, at(-120_000))
  await apiKeys.revoke(t.db, expiredThenRevoked, at(-1000))
  await t.db.run('DELETE FROM api_keys WHERE id = ?', [gone])

  const ids = [alive, aliveUntilLater, revoked, expired, revokedThenExpired, expiredThenRevoked, gone]
  expect(await apiKeys.refusedAmong(t.db, ids, now)).toEqual([
    { id: revoked, why: 'revoked' },
    { id: expired, why: 'expired' },
    { id: revokedThenExpired, why: 'revoked' },
    { id: expiredThenRevoked, why: 'expired' },
    { id: gone, why: 'revoked' },
  ])
})
