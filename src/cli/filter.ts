/**
 * The run filter flags `runs` and `runs bulk` share, read into a RunFilter:
 * the same flags select the same runs whether you list them or act on them.
 */
import type { Command } from 'commander'
import { ClientError } from '../client/http.ts'
import { type Ctx, UsageError } from './context.ts'
import { DEFINITION_ID } from './documents.ts'

export const STATUSES = [
  'SCHEDULED',
  'STARTING',
  'RUNNING',
  'PAUSED',
  'ENDING',
  'COMPLETED',
  'CANCELLED',
  'FAILED',
  'MISSED',
] as const
export type Status = (typeof STATUSES)[number]

export interface FilterOptions {
  status?: string[]
  definition?: string
  scope?: string
  after?: string
  before?: string
  rehearsal?: boolean
}

/** `--status` may be given more than once, each a comma list. */
function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}

/** Add the filter flags to `cmd`. */
export function filterOptions(cmd: Command): Command {
  return cmd
    .option(
      '-s, --status <list>',
      'only these statuses, comma-separated or repeated (e.g. running,paused)',
      collect,
    )
    .option('-d, --definition <slug>', 'only the runs of this definition')
    .option('--scope <scope>', 'only this scope ("" is the default scope)')
    .option('--after <instant>', 'scheduled at or after this ISO-8601 instant')
    .option('--before <instant>', 'scheduled before this ISO-8601 instant (exclusive)')
    .option('--rehearsal', 'rehearsals only')
    .option('--no-rehearsal', 'real runs only (no rehearsals)')
}

export async function definitionId(ctx: Ctx, slug: string): Promise<string> {
  const data = await ctx.client.request(DEFINITION_ID, { slug })
  if (!data.definition)
    throw new ClientError(`No definition with slug ${JSON.stringify(slug)} exists.`, 'NOT_FOUND')
  return data.definition.id
}

function statusesOf(lists: string[] | undefined): Status[] | undefined {
  if (!lists) return undefined
  return lists.flatMap((list) =>
    list.split(',').map((raw) => {
      const s = raw.trim().toUpperCase()
      if (!(STATUSES as readonly string[]).includes(s))
        throw new UsageError(`--status: ${JSON.stringify(raw)} is not a run status (${STATUSES.join(', ')})`)
      return s as Status
    }),
  )
}

/** An ISO-8601 instant as the server takes it; anything else is a usage mistake. */
export function instantOf(flag: string, raw: string): string
export function instantOf(flag: string, raw: string | undefined): string | undefined
export function instantOf(flag: string, raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined
  const at = Date.parse(raw)
  if (Number.isNaN(at))
    throw new UsageError(`${flag}: ${JSON.stringify(raw)} is not a date-time (e.g. 2026-12-24T18:00:00Z)`)
  return new Date(at).toISOString()
}

/** The RunFilter the flags say (the definition's slug looked up; unknown: NOT_FOUND). */
export async function filterOf(ctx: Ctx, opts: FilterOptions) {
  const statuses = statusesOf(opts.status)
  const scheduledAfter = instantOf('--after', opts.after)
  const scheduledBefore = instantOf('--before', opts.before)
  return {
    statuses,
    scope: opts.scope,
    scheduledAfter,
    scheduledBefore,
    rehearsal: opts.rehearsal,
    definitionId: opts.definition ? await definitionId(ctx, opts.definition) : undefined,
  }
}
