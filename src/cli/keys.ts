/**
 * `keys create|list|revoke`: API keys for people and services (admin). The
 * secret of a new key is printed once, on its own line (or as `secret` with
 * --json), and never again: the server keeps only its digest.
 */
import type { Command } from 'commander'
import { clientOptions, contextOf, EXIT, printJson, runCommand, UsageError } from './context.ts'
import { API_KEYS, CREATE_API_KEY, REVOKE_API_KEY } from './documents.ts'
import { ago, table } from './table.ts'

const ROLES = ['viewer', 'operator', 'admin'] as const
type RoleName = (typeof ROLES)[number]

function roleOf(raw: string): 'VIEWER' | 'OPERATOR' | 'ADMIN' {
  const role = raw.toLowerCase()
  if (!ROLES.includes(role as RoleName))
    throw new UsageError(`--role: ${JSON.stringify(raw)} is not a role; use ${ROLES.join(', ')}`)
  return role.toUpperCase() as 'VIEWER' | 'OPERATOR' | 'ADMIN'
}

/** `--expires-at` as ISO-8601 UTC; a relative `30d`, `12h` or `90m` counts from now. */
export function expiryOf(raw: string | undefined, now = Date.now()): string | undefined {
  if (raw === undefined) return undefined
  const relative = /^(\d+)\s*([mhd])$/.exec(raw.trim())
  if (relative) {
    const unit = { m: 60_000, h: 3_600_000, d: 86_400_000 }[relative[2] as 'm' | 'h' | 'd']
    return new Date(now + Number(relative[1]) * unit).toISOString()
  }
  const at = Date.parse(raw)
  if (Number.isNaN(at))
    throw new UsageError(`--expires-at: ${JSON.stringify(raw)} is neither a date-time nor a span like 30d`)
  return new Date(at).toISOString()
}

function teamsOf(raw: string | undefined): string[] | undefined {
  if (raw === undefined) return undefined
  return raw
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean)
}

function state(k: { revokedAt: string | null; expiresAt: string | null }): string {
  if (k.revokedAt) return `revoked ${ago(k.revokedAt)}`
  if (k.expiresAt && Date.parse(k.expiresAt) <= Date.now()) return `expired ${ago(k.expiresAt)}`
  return k.expiresAt ? `expires ${ago(k.expiresAt)}` : 'active'
}

export function registerKeyCommands(program: Command): void {
  const keys = program.command('keys').description('API keys for people and services (admin)')

  clientOptions(
    keys
      .command('create')
      .description('make a key; its secret is printed once and never again')
      .argument('<name>', 'who or what the key is for (recorded on every action it takes)')
      .requiredOption('--role <role>', `the key's role: ${ROLES.join(', ')}`)
      .option('--teams <list>', 'comma-separated teams (cues assigned to a team find its members)')
      .option('--expires-at <when>', 'an ISO-8601 date-time, or a span from now such as 30d, 12h, 90m'),
  ).action((name: string, opts: { role: string; teams?: string; expiresAt?: string }, cmd: Command) =>
    runCommand(async () => {
      const variables = {
        name,
        role: roleOf(opts.role),
        teams: teamsOf(opts.teams),
        expiresAt: expiryOf(opts.expiresAt),
      }
      const ctx = contextOf(cmd)
      const { createApiKey } = await ctx.client.request(CREATE_API_KEY, variables)
      if (ctx.json) printJson(createApiKey)
      else {
        const k = createApiKey.key
        ctx.out(
          `key ${k.id} for ${k.name} (${k.role.toLowerCase()}${k.teams.length ? `, teams ${k.teams.join(', ')}` : ''}), ${state(k)}`,
        )
        ctx.out('secret (shown once; store it now):')
        ctx.out(createApiKey.secret)
      }
      return EXIT.done
    }),
  )

  clientOptions(
    keys.command('list').description('the keys, newest first').option('--all', 'include revoked keys'),
  ).action((opts: { all?: boolean }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const { apiKeys } = await ctx.client.request(API_KEYS, { includeRevoked: opts.all === true })
      if (ctx.json) printJson(apiKeys)
      else if (apiKeys.length === 0) ctx.out('no keys')
      else
        ctx.out(
          table(
            ['ID', 'NAME', 'ROLE', 'TEAMS', 'PREFIX', 'CREATED BY', 'LAST USED', 'STATE'],
            apiKeys.map((k) => [
              k.id,
              k.name,
              k.role.toLowerCase(),
              k.teams.join(',') || '-',
              k.prefix,
              k.createdBy,
              ago(k.lastUsedAt),
              state(k),
            ]),
          ),
        )
      return EXIT.done
    }),
  )

  clientOptions(
    keys
      .command('revoke')
      .description(
        'revoke a key: every instance refuses it within STATUS_POLL_MS, open subscriptions included',
      )
      .argument('<key-id>'),
  ).action((id: string, _opts: unknown, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const { revokeApiKey } = await ctx.client.request(REVOKE_API_KEY, { id })
      if (ctx.json) printJson(revokeApiKey)
      else ctx.out(`key ${revokeApiKey.id} for ${revokeApiKey.name}: ${state(revokeApiKey)}`)
      return EXIT.done
    }),
  )
}
