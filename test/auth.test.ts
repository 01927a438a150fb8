import { describe, expect, it } from 'vitest'
import { authenticate, ROLES, roleAllows, tokenActor } from '../src/auth.ts'
import { loadConfig } from '../src/config.ts'

const ADMIN = 'admin-token-0123456789'
const OPERATOR = 'operator-token-0123456789'
const VIEWER = 'viewer-token-0123456789'
const { tokens } = loadConfig({
  SHOWRUNNER_TOKENS: `admin:${ADMIN},operator:${OPERATOR},viewer:${VIEWER}`,
})

describe('roleAllows', () => {
  it('orders admin ⊇ operator ⊇ viewer', () => {
    const table = ROLES.map((r) => ROLES.map((n) => roleAllows(r, n)))
    expect(table).toEqual([
      // needed: viewer, operator, admin
      [true, false, false], // viewer
      [true, true, false], // operator
      [true, true, true], // admin
    ])
  })
})

describe('authenticate', () => {
  it('answers the role and actor of the matching token', () => {
    expect(authenticate(`Bearer ${ADMIN}`, tokens)).toEqual({
      role: 'admin',
      name: tokenActor('admin', ADMIN),
      actor: tokenActor('admin', ADMIN),
      teams: [],
      source: 'token',
    })
    expect(authenticate(`Bearer ${OPERATOR}`, tokens)?.role).toBe('operator')
    expect(authenticate(`Bearer ${VIEWER}`, tokens)?.role).toBe('viewer')
  })

  it('never puts the token in the principal', () => {
    const p = authenticate(`Bearer ${ADMIN}`, tokens)
    expect(JSON.stringify(p)).not.toContain(ADMIN)
    expect(p?.actor).toMatch(/^admin#[0-9a-f]{8}$/)
  })

  it('accepts any case of the scheme and surrounding spaces', () => {
    expect(authenticate(`bearer ${ADMIN}`, tokens)?.role).toBe('admin')
    expect(authenticate(`BEARER   ${ADMIN}  `, tokens)?.role).toBe('admin')
    expect(authenticate(`  Bearer\t${ADMIN}`, tokens)?.role).toBe('admin')
  })

  it('refuses missing, malformed and unknown credentials', () => {
    expect(authenticate(undefined, tokens)).toBeNull()
    expect(authenticate(null, tokens)).toBeNull()
    expect(authenticate('', tokens)).toBeNull()
    expect(authenticate(ADMIN, tokens)).toBeNull()
    expect(authenticate(`Basic ${ADMIN}`, tokens)).toBeNull()
    expect(authenticate('Bearer ', tokens)).toBeNull()
    expect(authenticate(`Bearer ${ADMIN} extra`, tokens)).toBeNull()
    expect(authenticate(`Bearer ${ADMIN.slice(0, -1)}`, tokens)).toBeNull()
    expect(authenticate(`Bearer ${ADMIN}x`, tokens)).toBeNull()
    expect(authenticate(`Bearer ${ADMIN.toUpperCase()}`, tokens)).toBeNull()
    expect(authenticate(`Bearer ${ADMIN}`, [])).toBeNull()
  })
})
