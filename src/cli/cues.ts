/** `cues` and `cue resolve|skip`: the inbox of steps waiting on a person. */
import type { Command } from 'commander'
import { clientOptions, contextOf, EXIT, printJson, runCommand } from './context.ts'
import { CUES, RESOLVE_CUE, SKIP_STEP } from './documents.ts'
import { ago, table } from './table.ts'

function promptOf(params: unknown): string {
  const prompt = (params as { prompt?: unknown } | null)?.prompt
  return typeof prompt === 'string' ? prompt : '-'
}

export function registerCueCommands(program: Command): void {
  clientOptions(
    program
      .command('cues')
      .description('the cues waiting on a person, oldest first')
      .option('-n, --limit <n>', 'at most this many (1..500)', '100')
      .option('--mine', 'only the cues for me: assigned to my name or one of my teams, or to nobody'),
  ).action((opts: { limit: string; mine?: boolean }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const data = await ctx.client.request(CUES, {
        limit: Number(opts.limit) || 100,
        mine: opts.mine === true,
      })
      if (ctx.json) printJson(data.waitingSteps)
      else if (data.waitingSteps.length === 0) ctx.out('no cues waiting')
      else
        ctx.out(
          table(
            ['STEP', 'RUN', 'DEFINITION', 'SCOPE', 'PHASE', 'WAITING', 'FOR', 'PROMPT'],
            data.waitingSteps.map((s) => [
              s.id,
              s.run.id,
              s.run.definition.slug,
              s.run.scope === '' ? '""' : s.run.scope,
              s.phase,
              ago(s.startedAt),
              s.cue?.assignees.length ? s.cue.assignees.join(',') : 'anyone',
              promptOf(s.params),
            ]),
          ),
        )
      return EXIT.done
    }),
  )

  const cue = program.command('cue').description('answer a cue')
  for (const action of ['resolve', 'skip'] as const) {
    clientOptions(
      cue
        .command(action)
        .description(
          action === 'resolve'
            ? 'resolve a cue: its run continues at once; exit 3 when it was already answered'
            : 'skip a waiting step: its run goes on; exit 3 when it had already moved on',
        )
        .argument('<step-id>')
        .option('--note <text>', 'kept with the answer (for skip: the reason)'),
    ).action((stepId: string, opts: { note?: string }, cmd: Command) =>
      runCommand(async () => {
        const ctx = contextOf(cmd)
        const result =
          action === 'resolve'
            ? (await ctx.client.request(RESOLVE_CUE, { stepId, note: opts.note })).resolveCue
            : (await ctx.client.request(SKIP_STEP, { stepId, reason: opts.note })).skipStep
        if (ctx.json) printJson(result)
        else
          ctx.out(
            result.applied
              ? `${action === 'resolve' ? 'resolved' : 'skipped'} step ${stepId}: now ${result.step.status}; run ${result.step.run.id} is ${result.step.run.status}`
              : `not ${action === 'resolve' ? 'resolved' : 'skipped'}: step ${stepId} is ${result.step.status} (applied: false)`,
          )
        return result.applied ? EXIT.done : EXIT.notApplied
      }),
    )
  }
}
