/**
 * The `showrunner` commands that are a client of a running server (for
 * scripts and people at a terminal). Each area registers its commands from its
 * own module; a new area is one more module and one line here.
 */
import type { Command } from 'commander'
import { registerCalendarCommands } from './calendar.ts'
import { registerCueCommands } from './cues.ts'
import { registerDefinitionCommands } from './definitions.ts'
import { registerHealthCommand } from './health.ts'
import { registerKeyCommands } from './keys.ts'
import { registerOperationCommands } from './operations.ts'
import { registerRunCommands } from './runs.ts'

export function registerClientCommands(program: Command): void {
  registerDefinitionCommands(program)
  registerRunCommands(program)
  registerCueCommands(program)
  registerHealthCommand(program)
  registerKeyCommands(program)
  registerOperationCommands(program)
  registerCalendarCommands(program)
}
