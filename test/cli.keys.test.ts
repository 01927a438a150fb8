/**
 * `showrunner keys create|list|revoke` as a script runs them, against a real
 * server: the secret printed once and usable as a token at once, the list
 * without secrets, a revoked key refused, and the admin-only and usage
 * refusals with their exit codes.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { expiryOf } from '../src/cli/keys.ts'
import { type CliResult, runCli } from './helpers/cliClient.ts'
import { startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let dir: string

beforeAll(async () => {
  s = await startTestServer()
  dir = mkdtempSync(join(tmpdir(), 'sr-cli-keys-'))
})
afterAll(async () => {
  await s?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

function cli(args: string[], token: string | null = TOKENS.admin): Promise<CliResult> {
  return runCli(args, { url: s.url, cwd: dir, token })
}

describe('keys', () => {
  it('creates a key whose secret is printed once and works at once; list shows no secret; revoke refuses it', async () => {
    const made = await cli([
      'keys',
      'create',
      'Ada Lovelace',
      '--role',
      'operator',
      '--teams',
      'stage, lights',
      '--expires-at',
      '30d',
    ])
    expect(made, made.stderr).toMatchObject({ code: 0 })
    const lines = made.stdout.trim().split('\n')
    const secret = lines.at(-1) ?? ''
    expect(secret).toMatch(/^sr_live_\S{20,}$/)
    expect(lines[0]).toMatch(/^key \d+ for Ada Lovelace \(operator, teams stage, lights\), expires in \d+ h$/)
    const id = /^key (\d+)/.exec(lines[0] ?? '')?.[1] ?? ''

    const asAda = await cli(['cues', '--json'], secret)
    expect(asAda, asAda.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(asAda.stdout)).toEqual([])

    const listed = await cli(['keys', 'list'])
    expect(listed.code).toBe(0)
    expect(listed.stdout).toMatch(/^ID\s+NAME\s+ROLE\s+TEAMS\s+PREFIX\s+CREATED BY\s+LAST USED\s+STATE$/m)
    expect(listed.stdout).toMatch(
      new RegExp(`^${id}\\s+Ada Lovelace\\s+operator\\s+stage,lights\\s+sr_live_`, 'm'),
    )
    const json = await cli(['keys', 'list', '--json'])
    expect(json.stdout).not.toContain(secret)
    expect(json.stdout).not.toContain(secret.slice(12))
    const [key] = JSON.parse(json.stdout) as { id: string; name: string; revokedAt: string | null }[]
    expect(key).toMatchObject({ id, name: 'Ada Lovelace', revokedAt: null })

    const revoked = await cli(['keys', 'revoke', id])
    expect(revoked, revoked.stderr).toMatchObject({ code: 0 })
    expect(revoked.stdout).toMatch(new RegExp(`^key ${id} for Ada Lovelace: revoked `))

    const refused = await cli(['cues'], secret)
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain('UNAUTHENTICATED')

    expect((await cli(['keys', 'list'])).stdout.trim()).toBe('no keys')
    expect((await cli(['keys', 'list', '--all'])).stdout).toContain('Ada Lovelace')
  })

  it('--json answers the secret once with the key', async () => {
    const made = await cli(['keys', 'create', 'deploy-bot', '--role', 'viewer', '--json'])
    expect(made, made.stderr).toMatchObject({ code: 0 })
    const answer = JSON.parse(made.stdout) as {
      secret: string
      key: { name: string; role: string; teams: string[] }
    }
    expect(answer.secret).toMatch(/^sr_live_/)
    expect(answer.key).toMatchObject({ name: 'deploy-bot', role: 'VIEWER', teams: [] })
  })

  it('is for admins: an operator gets FORBIDDEN, exit 1; no token UNAUTHENTICATED', async () => {
    const op = await cli(['keys', 'create', 'x', '--role', 'viewer'], TOKENS.operator)
    expect(op.code).toBe(1)
    expect(op.stderr).toContain('FORBIDDEN')
    const none = await cli(['keys', 'list'], null)
    expect(none.code).toBe(1)
    expect(none.stderr).toContain('UNAUTHENTICATED')
  })

  it('usage mistakes exit 2 before anything is sent', async () => {
    const noRole = await cli(['keys', 'create', 'x'])
    expect(noRole.code).toBe(2)
    expect(noRole.stderr).toContain('--role')
    const badRole = await cli(['keys', 'create', 'x', '--role', 'boss'])
    expect(badRole.code).toBe(2)
    expect(badRole.stderr).toContain('is not a role; use viewer, operator, admin')
    const badExpiry = await cli(['keys', 'create', 'x', '--role', 'viewer', '--expires-at', 'soonish'])
    expect(badExpiry.code).toBe(2)
    expect(badExpiry.stderr).toContain('--expires-at')
    expect((await cli(['keys', 'revoke'])).code).toBe(2)
    const names = JSON.parse((await cli(['keys', 'list', '--all', '--json'])).stdout).map(
      (k: { name: string }) => k.name,
    )
    expect(names).not.toContain('x')
  })

  it('reads --expires-at as a date-time or a span from now', () => {
    const now = Date.parse('2026-12-01T12:00:00Z')
    expect(expiryOf('30d', now)).toBe('2026-12-31T12:00:00.000Z')
    expect(expiryOf('90m', now)).toBe('2026-12-01T13:30:00.000Z')
    expect(expiryOf('2027-01-01T00:00:00+01:00', now)).toBe('2026-12-31T23:00:00.000Z')
    expect(expiryOf(undefined, now)).toBeUndefined()
  })
})
