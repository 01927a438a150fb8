/** `health`: whether the server drives runs, and what waits on people; exit 1 when not ok. */
import type { Command } from 'commander'
import { clientOptions, contextOf, EXIT, printJson, runCommand } from './context.ts'
import { HEALTH } from './documents.ts'
import { ago, table } from './table.ts'

export function registerHealthCommand(program: Command): void {
  clientOptions(
    program.command('health').description("the server's health; exit 1 when it is not ok"),
  ).action((_opts: unknown, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const { health } = await ctx.client.request(HEALTH)
      if (ctx.json) printJson(health)
      else {
        ctx.out(`ok: ${health.ok}   database: ${health.database}   degraded runs: ${health.degradedRuns}`)
        ctx.out(
          `waiting steps: ${health.waitingSteps}${health.oldestWaitingStepAt ? ` (oldest ${ago(health.oldestWaitingStepAt)})` : ''}`,
        )
        const counts = Object.entries(health.runsByStatus as Record<string, number>).filter(([, n]) => n > 0)
        ctx.out(`runs: ${counts.map(([s, n]) => `${s} ${n}`).join(', ') || 'none'}`)
        ctx.out(
          health.runners.length === 0
            ? 'runners: none ticked recently'
            : table(
                ['RUNNER', 'HOST', 'TICK LAG', 'LAST TICK'],
                health.runners.map((r) => [r.id, r.host, `${r.tickLagMs} ms`, ago(r.lastTickAt)]),
              ),
        )
      }
      if (health.ok) return EXIT.done
      process.stderr.write(
        'showrunner: NOT_OK: the server is not healthy (no runner ticked recently, or no database)\n',
      )
      return EXIT.error
    }),
  )
}
