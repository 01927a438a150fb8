/** `runs`, `run start|pause|resume|cancel` and `watch`: operating runs. */
import type { Command } from 'commander'
import type { ResultOf } from '../client/graphql.ts'
import { ClientError } from '../client/http.ts'
import { type Ctx, clientOptions, contextOf, EXIT, printJson, runCommand, UsageError } from './context.ts'
import { CANCEL_RUN, PAUSE_RUN, RESUME_RUN, RUN_END, RUN_STATUS, RUNS, START_RUN } from './documents.ts'
import { definitionId, type FilterOptions, filterOf, filterOptions } from './filter.ts'
import { ago, table } from './table.ts'

type RunRow = ResultOf<typeof RUNS>['runPage']['nodes'][number]

const TERMINAL = new Set<string>(['COMPLETED', 'CANCELLED', 'FAILED', 'MISSED'])

function runTable(runs: readonly RunRow[]): string {
  return table(
    ['ID', 'DEFINITION', 'SCOPE', 'STATUS', 'HEALTH', 'PHASE', 'SCHEDULED', 'WAITING'],
    runs.map((r) => [
      r.id,
      r.definition.slug,
      r.scope === '' ? '""' : r.scope,
      r.rehearsal ? `${r.status} (rehearsal)` : r.status,
      r.health,
      r.currentPhase,
      `${r.scheduledFor} (${ago(r.scheduledFor)})`,
      r.waitingSteps,
    ]),
  )
}

function paramsOf(text: string | undefined): unknown {
  if (text === undefined) return undefined
  try {
    return JSON.parse(text)
  } catch {
    throw new UsageError(`--params: not valid JSON: ${text}`)
  }
}

/** A control's answer: the run as it is now; exit 3 when the guard did not match. */
function controlled(ctx: Ctx, verb: string, result: { applied: boolean; run: RunRow }): number {
  if (ctx.json) printJson(result)
  else
    ctx.out(
      result.applied
        ? `${verb} run ${result.run.id}: now ${result.run.status}`
        : `not ${verb}: run ${result.run.id} is ${result.run.status} (applied: false)`,
    )
  return result.applied ? EXIT.done : EXIT.notApplied
}

export function registerRunCommands(program: Command): void {
  clientOptions(
    filterOptions(program.command('runs'))
      .description('list runs, newest first')
      .option('-n, --limit <n>', 'at most this many (1..500)', '20')
      // `runs bulk ...` takes the same filter flags as its own, not as these.
      .enablePositionalOptions(),
  ).action((opts: FilterOptions & { limit: string }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const first = Number(opts.limit)
      if (!Number.isInteger(first) || first < 1 || first > 500)
        throw new UsageError('--limit: a whole number from 1 to 500')
      const filter = await filterOf(ctx, opts)
      const data = await ctx.client.request(RUNS, { filter, first })
      if (ctx.json) printJson(data.runPage.nodes)
      else if (data.runPage.nodes.length === 0) ctx.out('no runs')
      else ctx.out(runTable(data.runPage.nodes))
      return EXIT.done
    }),
  )

  const run = program.command('run').description('start, pause, resume or cancel a run')
  clientOptions(
    run
      .command('start')
      .description('start a run of a definition now (or at --at)')
      .argument('<slug>', 'the definition')
      .option('--scope <scope>', 'the scope ("" is the default)')
      .option('--at <instant>', 'ISO-8601 start time (idempotent on definition, scope and instant)')
      .option('--params <json>', 'run params as JSON, e.g. \'{"name": "Ada"}\'')
      .option('--rehearsal', 'walk the program without side effects'),
  ).action(
    (
      slug: string,
      opts: { scope?: string; at?: string; params?: string; rehearsal?: boolean },
      cmd: Command,
    ) =>
      runCommand(async () => {
        const ctx = contextOf(cmd)
        const params = paramsOf(opts.params)
        const id = await definitionId(ctx, slug)
        const data = await ctx.client.request(START_RUN, {
          definitionId: id,
          scope: opts.scope,
          at: opts.at,
          params,
          rehearsal: opts.rehearsal === true,
        })
        if (ctx.json) printJson(data.startRun)
        else ctx.out(`started run ${data.startRun.id} (${data.startRun.status})`)
        return EXIT.done
      }),
  )
  for (const [name, verb] of [
    ['pause', 'paused'],
    ['resume', 'resumed'],
  ] as const) {
    clientOptions(run.command(name).description(`${name} a run`).argument('<run-id>')).action(
      (id: string, _opts: unknown, cmd: Command) =>
        runCommand(async () => {
          const ctx = contextOf(cmd)
          const result =
            name === 'pause'
              ? (await ctx.client.request(PAUSE_RUN, { id })).pauseRun
              : (await ctx.client.request(RESUME_RUN, { id })).resumeRun
          return controlled(ctx, verb, result)
        }),
    )
  }
  clientOptions(
    run
      .command('cancel')
      .description('cancel a run')
      .argument('<run-id>')
      .option('--reason <text>', 'why (kept in the log)'),
  ).action((id: string, opts: { reason?: string }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const result = (await ctx.client.request(CANCEL_RUN, { id, reason: opts.reason })).cancelRun
      return controlled(ctx, 'cancelled', result)
    }),
  )

  clientOptions(
    program
      .command('watch')
      .description("print a run's status live (SSE) until it ends; exit 0 when it COMPLETED, 1 otherwise")
      .argument('<run-id>'),
  ).action((id: string, _opts: unknown, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      let last: string | null = null
      for await (const event of ctx.client.subscribe(RUN_STATUS, { id })) {
        const s = event.runStatus
        last = s.status
        if (ctx.json) ctx.out(JSON.stringify(s))
        else
          ctx.out(
            `${s.updatedAt}  run ${s.id}  ${s.status.padEnd(9)}  ${s.health.padEnd(8)}  phase ${s.currentPhase ?? '-'}  waiting ${s.waitingSteps}`,
          )
        if (TERMINAL.has(s.status)) break
      }
      if (last === null || !TERMINAL.has(last)) {
        // The stream ended early (a server restart): say how the run stands.
        const now = (await ctx.client.request(RUN_END, { id })).run
        if (!now) throw new ClientError(`No run with id ${JSON.stringify(id)} exists.`, 'NOT_FOUND')
        last = now.status
        if (!TERMINAL.has(last))
          throw new ClientError(`the live stream ended while run ${id} is ${last}; watch again`, 'NETWORK')
      }
      if (last === 'COMPLETED') return EXIT.done
      const end = (await ctx.client.request(RUN_END, { id })).run
      process.stderr.write(
        `showrunner: RUN_${last}: run ${id} ended ${last}${end?.lastError ? `: ${end.lastError}` : ''}\n`,
      )
      return EXIT.error
    }),
  )
}
