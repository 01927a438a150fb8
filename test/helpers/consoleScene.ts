/**
 * A small, believable world for the console suites and screenshots, made the
 * way a client would make it: over the GraphQL API with the admin token.
 */
import type { TestServer } from './server.ts'

/** A show that asks two cues with waits between them, then wraps up. */
export const SHOW_PROGRAM = {
  phases: [
    {
      name: 'doors',
      steps: [
        { kind: 'core.log', params: { message: 'doors open for {{definition.title}} on {{run.scope}}' } },
        { kind: 'core.cue', params: { prompt: 'Open the gates?' } },
      ],
    },
    {
      name: 'show',
      steps: [
        { kind: 'core.wait', params: { seconds: 600 } },
        { kind: 'core.cue', params: { prompt: 'Start the band?' } },
        { kind: 'core.wait', params: { seconds: 1800 } },
      ],
    },
    {
      name: 'wrap-up',
      ending: true,
      steps: [{ kind: 'core.log', params: { message: 'that was the show' } }],
    },
  ],
}

/** A quick one: a short wait then a cue, so stand-by has something coming up soon. */
export const QUICK_PROGRAM = {
  phases: [
    {
      name: 'prepare',
      steps: [
        { kind: 'core.wait', params: { seconds: 240 } },
        { kind: 'core.cue', params: { prompt: 'Clear the launch zone?' } },
        { kind: 'core.log', params: { message: 'launching' } },
      ],
    },
  ],
}

export async function must<T>(s: TestServer, query: string, variables?: Record<string, unknown>): Promise<T> {
  const res = await s.gql<T>(query, { variables })
  if (res.body.errors?.length || !res.body.data) {
    throw new Error(`${query.slice(0, 60)}…: ${JSON.stringify(res.body.errors)}`)
  }
  return res.body.data
}

export async function createDefinition(s: TestServer, input: Record<string, unknown>): Promise<string> {
  const d = await must<{ createDefinition: { id: string } }>(
    s,
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    { input },
  )
  return d.createDefinition.id
}

export async function startRun(
  s: TestServer,
  definitionId: string,
  scope = '',
  rehearsal = false,
): Promise<string> {
  const d = await must<{ startRun: { id: string } }>(
    s,
    'mutation ($d: ID!, $s: String, $r: Boolean) { startRun(definitionId: $d, scope: $s, rehearsal: $r) { id } }',
    { d: definitionId, s: scope, r: rehearsal },
  )
  return d.startRun.id
}

export interface WaitingCue {
  id: string
  run: { id: string }
}

export async function waitingCues(s: TestServer): Promise<WaitingCue[]> {
  const d = await must<{ waitingSteps: WaitingCue[] }>(s, '{ waitingSteps(limit: 500) { id run { id } } }')
  return d.waitingSteps
}

/** Two scheduled shows and a manual one, some runs in progress with cues waiting. */
export async function buildScene(
  s: TestServer,
): Promise<{ show: string; fireworks: string; runs: string[] }> {
  const show = await createDefinition(s, {
    slug: 'evening-show',
    title: 'Evening show',
    description: 'Doors, the gates cue, the band, and the wrap-up.',
    schedule: '30 19 * * *',
    timezone: 'Europe/London',
    scopes: ['main-stage', 'side-stage'],
    concurrencyKey: 'stage:{{run.scope}}',
    program: SHOW_PROGRAM,
  })
  const fireworks = await createDefinition(s, {
    slug: 'fireworks',
    title: 'Fireworks',
    schedule: '0 22 * * 5,6',
    timezone: 'America/New_York',
    scopes: ['harbour'],
    program: QUICK_PROGRAM,
  })
  await createDefinition(s, {
    slug: 'sound-check',
    title: 'Sound check',
    description: 'Started by hand before doors.',
    program: { phases: [{ name: 'check', steps: [{ kind: 'core.log', params: { message: 'one two' } }] }] },
  })
  const runs = [
    await startRun(s, show, 'main-stage'),
    await startRun(s, show, 'side-stage', true),
    await startRun(s, fireworks, 'harbour'),
  ]
  return { show, fireworks, runs }
}
