/**
 * The custom step kind example (examples/lightsStep.ts) registered in a real
 * server, published through the API and run by the co-hosted runner: so the
 * example in docs/step-kinds.md compiles and does what the page says.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type LightingCommand, lightsStep } from '../examples/lightsStep.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { eventually, startTestServer, type TestServer } from './helpers/server.ts'

const commands: LightingCommand[] = []
let server: TestServer

beforeAll(async () => {
  const registry = createDefaultRegistry()
  registry.register(
    lightsStep(async (command) => {
      commands.push(command)
      return command.scene !== 'blackout-forever'
    }),
  )
  server = await startTestServer({ runner: true, deps: { registry } })
})
afterAll(() => server?.close())

const program = (scene: string) => ({
  phases: [{ name: 'main', steps: [{ kind: 'acme.lights', params: { scene, fadeSeconds: 2 } }] }],
})

async function define(slug: string, scene: string): Promise<string> {
  const res = await server.gql<{ createDefinition: { id: string } }>(
    'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
    { variables: { input: { slug, title: slug, program: program(scene) } } },
  )
  expect(res.body.errors).toBeUndefined()
  return res.body.data?.createDefinition.id as string
}

interface RunView {
  id: string
  status: string
  lastError: string | null
  steps: { id: string; status: string; result: unknown }[]
  logs: { message: string }[]
}

async function runTo(
  definitionId: string,
  scope: string,
  rehearsal: boolean,
  status: string,
): Promise<RunView> {
  const started = await server.gql<{ startRun: { id: string } }>(
    'mutation ($d: ID!, $s: String, $r: Boolean) { startRun(definitionId: $d, scope: $s, rehearsal: $r) { id } }',
    { variables: { d: definitionId, s: scope, r: rehearsal } },
  )
  const id = started.body.data?.startRun.id as string
  return eventually(async () => {
    const res = await server.gql<{ run: RunView }>(
      'query ($id: ID!) { run(id: $id) { id status lastError steps { id status result } logs { message } } }',
      { variables: { id } },
    )
    const run = res.body.data?.run
    return run?.status === status ? run : null
  })
}

describe('a custom step kind (examples/lightsStep.ts)', () => {
  it('runs with rendered params, its idempotency key and a stored result', async () => {
    const id = await define('lights-hall', '{{run.scope}}-warm')
    const run = await runTo(id, 'hall', false, 'COMPLETED')
    const [step] = run.steps
    expect(step?.result).toEqual({ scene: 'hall-warm' })
    const sent = commands.filter((c) => c.scene === 'hall-warm')
    expect(sent).toEqual([{ scene: 'hall-warm', fadeSeconds: 2, idempotencyKey: `${run.id}-${step?.id}` }])
    expect(run.logs.map((l) => l.message)).toContain('lights: hall-warm (fade 2 s)')
  })

  it('in a rehearsal, logs what it would do and never calls the desk', async () => {
    const id = await define('lights-rehearsal', 'rehearsal-only')
    const run = await runTo(id, 'stage', true, 'COMPLETED')
    expect(commands.some((c) => c.scene === 'rehearsal-only')).toBe(false)
    expect(run.logs.some((l) => l.message.includes('would set the lights to "rehearsal-only"'))).toBe(true)
  })

  it('a refusal that retrying cannot fix fails the run at once, with the reason', async () => {
    const id = await define('lights-refused', 'blackout-forever')
    const run = await runTo(id, '', false, 'FAILED')
    expect(run.lastError).toContain('the lighting desk has no scene "blackout-forever"')
    expect(commands.filter((c) => c.scene === 'blackout-forever')).toHaveLength(1)
  })

  it('bad params are refused when the program is published, with their path', async () => {
    const res = await server.gql(
      'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
      { variables: { input: { slug: 'lights-bad', title: 'bad', program: program('') } } },
    )
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(res.body.errors?.[0]?.message).toContain('phases[0].steps[0].params.scene: must not be empty')
  })
})
