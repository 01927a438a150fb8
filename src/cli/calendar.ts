/**
 * `occurrence skip|move` (one occurrence of a schedule, named by its original
 * instant, before or after its run is made) and `calendars` (the blackout
 * calendars and their entries). Both answers are idempotent on the server, so
 * a script may simply run the command again.
 */
import type { Command } from 'commander'
import type { ResultOf } from '../client/graphql.ts'
import { type Ctx, clientOptions, contextOf, EXIT, printJson, runCommand } from './context.ts'
import { CALENDARS, MOVE_OCCURRENCE, SKIP_OCCURRENCE } from './documents.ts'
import { definitionId, instantOf } from './filter.ts'
import { table } from './table.ts'

type Occurrence = ResultOf<typeof SKIP_OCCURRENCE>['skipOccurrence']

function printOccurrence(ctx: Ctx, slug: string, o: Occurrence): number {
  if (ctx.json) printJson(o)
  else {
    const where = o.status === 'MOVED' && o.movedTo ? ` to ${o.movedTo}` : ''
    const run = o.run ? `; run ${o.run.id} is ${o.run.status}` : ''
    ctx.out(
      `${slug} at ${o.at} (scope ${JSON.stringify(o.scope)}): ${o.status}${where}${o.reason ? ` (${o.reason})` : ''}${run}`,
    )
  }
  return EXIT.done
}

export function registerCalendarCommands(program: Command): void {
  const occurrence = program
    .command('occurrence')
    .description("skip or move one occurrence of a definition's schedule")

  clientOptions(
    occurrence
      .command('skip')
      .description('skip one occurrence (a made, never-started run is withdrawn); idempotent')
      .argument('<definition>', "the definition's slug")
      .argument('<at>', "the occurrence's instant in the schedule (ISO-8601)")
      .requiredOption('--reason <text>', 'why (audited, and shown in upcoming)')
      .option('--scope <scope>', 'the scope ("" is the default)'),
  ).action((slug: string, at: string, opts: { reason: string; scope?: string }, cmd: Command) =>
    runCommand(async () => {
      const instant = instantOf('<at>', at)
      const ctx = contextOf(cmd)
      const { skipOccurrence } = await ctx.client.request(SKIP_OCCURRENCE, {
        definitionId: await definitionId(ctx, slug),
        at: instant,
        reason: opts.reason,
        scope: opts.scope,
      })
      return printOccurrence(ctx, slug, skipOccurrence)
    }),
  )

  clientOptions(
    occurrence
      .command('move')
      .description(
        'move one occurrence, named by its original instant; moving it again moves the same run again',
      )
      .argument('<definition>', "the definition's slug")
      .argument('<at>', "the occurrence's original instant in the schedule (ISO-8601)")
      .argument('<to>', 'its new instant (ISO-8601)')
      .option('--reason <text>', 'why (audited, and shown in upcoming)')
      .option('--scope <scope>', 'the scope ("" is the default)'),
  ).action((slug: string, at: string, to: string, opts: { reason?: string; scope?: string }, cmd: Command) =>
    runCommand(async () => {
      const from = instantOf('<at>', at)
      const target = instantOf('<to>', to)
      const ctx = contextOf(cmd)
      const { moveOccurrence } = await ctx.client.request(MOVE_OCCURRENCE, {
        definitionId: await definitionId(ctx, slug),
        at: from,
        to: target,
        reason: opts.reason,
        scope: opts.scope,
      })
      return printOccurrence(ctx, slug, moveOccurrence)
    }),
  )

  clientOptions(
    program.command('calendars').description('the blackout calendars, one line per entry'),
  ).action((_opts: unknown, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const { calendars } = await ctx.client.request(CALENDARS, {})
      if (ctx.json) printJson(calendars)
      else if (calendars.length === 0) ctx.out('no calendars')
      else
        ctx.out(
          table(
            ['NAME', 'ZONE', 'FROM', 'TO', 'YEARLY', 'LABEL'],
            calendars.flatMap((c) =>
              c.entries.length === 0
                ? [[c.name, c.timezone, '-', '-', '-', '(no entries)']]
                : c.entries.map((e) => [
                    c.name,
                    c.timezone,
                    e.from,
                    e.to,
                    e.yearly ? 'yearly' : '-',
                    e.label,
                  ]),
            ),
          ),
        )
      return EXIT.done
    }),
  )
}
