/**
 * The `showrunner` command: `serve` (what `npm start` runs), `migrate`, `demo`
 * and `token`, and the client commands for scripts (src/cli/: apply, diff,
 * export, runs, run, cues, cue, watch, health). It only wires the environment
 * to the pieces that do the work, and loads the server's pieces only for the
 * commands that run it (src/cli/serverCommands.ts).
 */
import { Command, CommanderError } from 'commander'
import { registerClientCommands } from './cli/index.ts'

/** Usage mistakes and bad configuration exit 2. */
const EXIT_USAGE = 2

/** The server's commands, loaded when one of them runs. */
const serverCommands = () => import('./cli/serverCommands.ts')

export function buildCli(): Command {
  const program = new Command()
  program
    .name('showrunner')
    .description(
      'Runs scheduled live events: definitions, runs, steps, a tick loop and a GraphQL API on MariaDB.',
    )
    .showHelpAfterError()
    // Usage mistakes exit 2 (commander's own default is 1); subcommands inherit this.
    .exitOverride()
    // A command's options are read only before its subcommand, so `runs bulk
    // cancel --status x` gives --status to `cancel`, not to `runs`.
    .enablePositionalOptions()
  const dataDirOption = [
    '--data-dir <dir>',
    'private MariaDB folder, used when DATABASE_URL is unset',
    '.data/mariadb',
  ] as const

  program
    .command('serve', { isDefault: true })
    .description(
      'serve GraphQL (HTTP, WebSocket, SSE) and run the tick loop; configuration comes from the environment',
    )
    .option(...dataDirOption)
    .option('--demo', 'load the demo definitions even when DATABASE_URL is set')
    .action(async (opts: { dataDir: string; demo?: boolean }) => (await serverCommands()).serve(opts))

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .option(...dataDirOption)
    .action(async (opts: { dataDir: string }) => (await serverCommands()).migrateCommand(opts))

  program
    .command('demo')
    .description('load the demo definitions (idempotent) and exit')
    .option(...dataDirOption)
    .action(async (opts: { dataDir: string }) => (await serverCommands()).demoCommand(opts))

  program
    .command('token')
    .description('print a new random token; use it as role:TOKEN in SHOWRUNNER_TOKENS')
    .action(async () => (await serverCommands()).printToken())

  registerClientCommands(program)
  return program
}

buildCli()
  .parseAsync(process.argv)
  .catch((err: unknown) => {
    if (err instanceof CommanderError) {
      // Commander printed the message (and the help) already.
      const asked = ['commander.helpDisplayed', 'commander.help', 'commander.version'].includes(err.code)
      process.exit(asked ? 0 : EXIT_USAGE)
    }
    console.error(`showrunner: ${(err as Error).message}`)
    process.exit(1)
  })
