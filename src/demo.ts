/**
 * Demo definitions for a first run: a cued show every 10 minutes in this
 * machine's time zone (its announcements go to the run log, so nothing leaves the
 * machine), and a manual one to start by hand. Loading is idempotent by slug.
 */
import * as definitions from '../sql/eventDefinitions.ts'
import { createDefinition, type DefinitionDeps } from './operations/definitions.ts'
import { canonicalTimezone } from './runner/schedule.ts'

export const DEMO_SLUGS = ['demo-cued-show', 'demo-manual'] as const

/** The machine's IANA zone, or UTC when it has none. */
export function machineTimezone(): string {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone
  return (zone && canonicalTimezone(zone)) || 'UTC'
}

/** Create the demo definitions that do not exist yet; answers the slugs created. */
export async function loadDemo(deps: DefinitionDeps, actor = 'demo'): Promise<string[]> {
  const created: string[] = []
  if (!(await definitions.getBySlug(deps.db, 'demo-cued-show'))) {
    await createDefinition(
      deps,
      {
        slug: 'demo-cued-show',
        title: 'Demo: the ten-minute show',
        description: 'Announces itself, waits for the stage manager to open the gates, then wraps up.',
        schedule: '*/10 * * * *',
        timezone: machineTimezone(),
        graceSeconds: 120,
        concurrencyKey: 'stage:{{run.scope}}',
        scopes: ['main-stage'],
        program: {
          phases: [
            {
              name: 'announce',
              steps: [
                { kind: 'core.log', params: { message: '{{definition.title}} starts now on {{run.scope}}' } },
                { kind: 'core.wait', params: { seconds: 5 } },
              ],
            },
            {
              name: 'main',
              steps: [
                // A cue nobody answers must not stall the show forever: it continues after 5 minutes.
                {
                  kind: 'core.cue',
                  params: { prompt: 'Open the gates', timeoutSeconds: 300, onTimeout: 'continue' },
                },
                { kind: 'core.log', params: { message: 'Gates are open' } },
              ],
            },
            {
              name: 'wrap-up',
              ending: true,
              steps: [{ kind: 'core.log', params: { message: 'Thanks for coming!' } }],
            },
          ],
        },
      },
      actor,
    )
    created.push('demo-cued-show')
  }
  if (!(await definitions.getBySlug(deps.db, 'demo-manual'))) {
    await createDefinition(
      deps,
      {
        slug: 'demo-manual',
        title: 'Demo: start me by hand',
        description: 'No schedule: start it with Start a run below (or startRun), then answer its cue.',
        schedule: null,
        timezone: machineTimezone(),
        program: {
          phases: [
            { name: 'intro', steps: [{ kind: 'core.log', params: { message: 'Hello {{params.name}}' } }] },
            {
              name: 'main',
              steps: [
                {
                  kind: 'core.cue',
                  params: { prompt: 'Ready when you are', timeoutSeconds: 600, onTimeout: 'continue' },
                },
              ],
            },
            { name: 'outro', ending: true, steps: [{ kind: 'core.log', params: { message: 'Goodbye' } }] },
          ],
        },
      },
      actor,
    )
    created.push('demo-manual')
  }
  return created
}
