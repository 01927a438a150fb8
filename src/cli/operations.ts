/**
 * Operating many shows from a terminal: `run retry` (a FAILED run again, from
 * its failed step or --from-step) and `runs bulk pause|resume|cancel` over the
 * same filter flags as `runs`, and `run retry-step` (a step in retry backoff
 * gets its next attempt now). Bulk actions are a dry run unless --apply, so
 * the count is seen before anything changes.
 */
import type { Command } from 'commander'
import { clientOptions, contextOf, EXIT, printJson, runCommand, UsageError } from './context.ts'
import { BULK_RUNS, RETRY_RUN, RETRY_STEP_NOW } from './documents.ts'
import { type FilterOptions, filterOf, filterOptions } from './filter.ts'

const BULK_ACTIONS = [
  ['pause', 'PAUSE', 'paused'],
  ['resume', 'RESUME', 'resumed'],
  ['cancel', 'CANCEL', 'cancelled'],
] as const

/** `run` and `runs` are made by registerRunCommands; this module adds to them. */
function existing(program: Command, name: string): Command {
  const cmd = program.commands.find((c) => c.name() === name)
  if (!cmd) throw new Error(`register the "${name}" command before the operations commands`)
  return cmd
}

function stepOf(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 0) throw new UsageError('--from-step: a step seq, a whole number from 0')
  return n
}

const plural = (n: number) => `${n} run${n === 1 ? '' : 's'}`

export function registerOperationCommands(program: Command): void {
  clientOptions(
    existing(program, 'run')
      .command('retry')
      .description(
        'retry a FAILED run: a new run of its version, scope and params, starting now; steps before ' +
          'the failed one (or --from-step) are skipped, so earlier webhooks are not sent again. ' +
          'Retrying the same run again answers the same retry.',
      )
      .argument('<run-id>', 'the FAILED run')
      .option(
        '--from-step <seq>',
        'the step seq to start from (0 = everything again; default: the failed step)',
      ),
  ).action((id: string, opts: { fromStep?: string }, cmd: Command) =>
    runCommand(async () => {
      const fromStep = stepOf(opts.fromStep)
      const ctx = contextOf(cmd)
      const { retryRun } = await ctx.client.request(RETRY_RUN, { id, fromStep })
      if (ctx.json) printJson(retryRun)
      else {
        const firstRun = retryRun.steps.find((st) => st.status !== 'SKIPPED')
        const skipped = retryRun.steps.filter((st) => st.status === 'SKIPPED').length
        ctx.out(
          `run ${retryRun.id} retries run ${retryRun.retryOf?.id ?? id} (${retryRun.definition.slug}, ` +
            `scope ${JSON.stringify(retryRun.scope)}) from step ${firstRun?.seq ?? '-'}` +
            ` (${skipped} skipped): now ${retryRun.status}`,
        )
      }
      return EXIT.done
    }),
  )

  clientOptions(
    existing(program, 'run')
      .command('retry-step')
      .description(
        'make the next attempt of a step in retry backoff (a webhook that failed, with attempts left) now ' +
          'instead of at its scheduled retry; exit 1 when the step is not in backoff or its run is not running, ' +
          'exit 3 when it moved on meanwhile',
      )
      .argument('<step-id>', 'the step (its id, as `showrunner run` and the API name it)'),
  ).action((stepId: string, _opts: unknown, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const { retryStepNow } = await ctx.client.request(RETRY_STEP_NOW, { stepId })
      const st = retryStepNow.step
      if (ctx.json) printJson(retryStepNow)
      else
        ctx.out(
          retryStepNow.applied
            ? `step ${st.id} of run ${st.run.id}: attempt ${st.attempts + 1} of ${st.maxAttempts} now`
            : `not retried: step ${st.id} is ${st.status} (applied: false)`,
        )
      return retryStepNow.applied ? EXIT.done : EXIT.notApplied
    }),
  )

  const bulk = existing(program, 'runs')
    .command('bulk')
    .description('pause, resume or cancel every run a filter selects (a dry run unless --apply)')
  for (const [name, action, done] of BULK_ACTIONS) {
    clientOptions(
      filterOptions(bulk.command(name))
        .description(
          `${name} the runs the filter selects, at most 10,000 per call. Without --apply it is a dry run: ` +
            `it prints how many runs would be ${done} and exits 3 (like apply --dry-run); with --apply it ` +
            `exits 0. An empty filter is refused by the server (exit 1).`,
        )
        .option('--apply', 'really do it (default: a dry run)')
        .option('--reason <text>', 'why (kept in the audit log and each changed run’s log)'),
    ).action((opts: FilterOptions & { apply?: boolean; reason?: string }, cmd: Command) =>
      runCommand(async () => {
        const ctx = contextOf(cmd)
        const filter = await filterOf(ctx, opts)
        const dryRun = opts.apply !== true
        const { bulkRuns } = await ctx.client.request(BULK_RUNS, {
          action,
          filter,
          dryRun,
          reason: opts.reason,
        })
        if (ctx.json) printJson(bulkRuns)
        else if (bulkRuns.dryRun) ctx.out(`would ${name} ${plural(bulkRuns.matched)}; run again with --apply`)
        else {
          ctx.out(
            `${done} ${bulkRuns.applied} of ${plural(bulkRuns.matched)} (bulk ${bulkRuns.bulkId ?? '-'})`,
          )
          if (bulkRuns.applied < bulkRuns.matched)
            ctx.out(
              'some runs were not changed (at most 10,000 per call, or they moved on): run again for the rest',
            )
        }
        return bulkRuns.dryRun ? EXIT.notApplied : EXIT.done
      }),
    )
  }
}
