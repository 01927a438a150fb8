/** The kept admin token: made once with mode 0600, read back unchanged, refused when unusable. */
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { AdminTokenError, loadOrCreateAdminToken } from '../src/adminToken.ts'

const dir = mkdtempSync(join(tmpdir(), 'sr-token-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('loadOrCreateAdminToken', () => {
  it('makes a token in a 0600 file (creating the folder) and reads the same one back', async () => {
    const file = join(dir, 'fresh', 'admin-token')
    const first = await loadOrCreateAdminToken(file)
    expect(first.created).toBe(true)
    expect(first.token).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(readFileSync(file, 'utf8').trim()).toBe(first.token)
    const again = await loadOrCreateAdminToken(file)
    expect(again).toEqual({ token: first.token, file, created: false })
  })

  it('gives every concurrent caller the same token', async () => {
    const file = join(dir, 'race', 'admin-token')
    const all = await Promise.all(Array.from({ length: 8 }, () => loadOrCreateAdminToken(file)))
    expect(new Set(all.map((k) => k.token)).size).toBe(1)
    expect(all.filter((k) => k.created)).toHaveLength(1)
  })

  it('narrows a file others could read to 0600', async () => {
    const file = join(dir, 'wide-token')
    writeFileSync(file, 'a-token-someone-wrote-by-hand-0123\n')
    chmodSync(file, 0o644)
    const kept = await loadOrCreateAdminToken(file)
    expect(kept.token).toBe('a-token-someone-wrote-by-hand-0123')
    expect(kept.narrowedFrom).toBe(0o644)
    expect(statSync(file).mode & 0o777).toBe(0o600)
  })

  it('refuses a file that holds no usable token, saying how to recover', async () => {
    const file = join(dir, 'bad-token')
    writeFileSync(file, 'short\n', { mode: 0o600 })
    await expect(loadOrCreateAdminToken(file)).rejects.toThrow(AdminTokenError)
    await expect(loadOrCreateAdminToken(file)).rejects.toThrow(/Delete it/)
  })
})
