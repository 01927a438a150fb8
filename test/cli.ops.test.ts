/**
 * `showrunner run retry`, `run retry-step`, `runs bulk`, `occurrence skip|move` and `calendars`
 * as a script runs them, against a real server with its runner: each command's
 * answer and exit code, checked again through the API; a usage mistake exits 2
 * before anything is sent; a server refusal exits 1 with its code.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CliResult, runCli } from './helpers/cliClient.ts'
import { unique } from './helpers/fixtures.ts'
import { startReceiver, type WebhookReceiver, waitFor } from './helpers/runnerHarness.ts'
import { startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

let s: TestServer
let receiver: WebhookReceiver
let dir: string

beforeAll(async () => {
  receiver = await startReceiver()
  receiver.route('/hooks/down', () => ({ status: 500, body: 'down' }))
  receiver.route('/hooks/flaky', (_call, nth) => (nth === 1 ? { status: 503 } : {}))
  s = await startTestServer({ runner: true, env: { WEBHOOK_ALLOW: `${receiver.url}/hooks/` } })
  dir = mkdtempSync(join(tmpdir(), 'sr-cli-ops-'))
})
afterAll(async () => {
  await s?.close()
  await receiver?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

function cli(args: string[]): Promise<CliResult> {
  return runCli(args, { url: s.url, cwd: dir, token: TOKENS.admin })
}

/** A GraphQL answer's data, failing the test on any error. */
async function data<T>(query: string, variables?: Record<string, unknown>): Promise<T> {
  const res = await s.gql<T>(query, { variables })
  expect(res.body.errors).toBeUndefined()
  return res.body.data as T
}

async function createDefinition(input: Record<string, unknown>): Promise<{ id: string; slug: string }> {
  const slug = unique('ops')
  const made = await data<{ createDefinition: { id: string } }>(
    `mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }`,
    { input: { slug, title: 'CLI ops show', ...input } },
  )
  return { id: made.createDefinition.id, slug }
}

const LOG_PROGRAM = { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'hi' } }] }] }

async function runStatus(id: string): Promise<string> {
  return (await data<{ run: { status: string } }>(`query ($id: ID!) { run(id: $id) { status } }`, { id })).run
    .status
}

describe('run retry', () => {
  it('retries a FAILED run from its failed step; a bad --from-step exits 2; a run that did not fail exits 1', async () => {
    const def = await createDefinition({
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              { kind: 'core.log', params: { message: 'before' } },
              { kind: 'core.webhook', params: { url: `${receiver.url}/hooks/down` }, retry: { attempts: 1 } },
            ],
          },
        ],
      },
    })
    const { startRun } = await data<{ startRun: { id: string } }>(
      `mutation ($d: ID!) { startRun(definitionId: $d) { id } }`,
      { d: def.id },
    )
    await waitFor(async () => (await runStatus(startRun.id)) === 'FAILED', { what: 'the run to fail' })

    const retried = await cli(['run', 'retry', startRun.id])
    expect(retried, retried.stderr).toMatchObject({ code: 0 })
    const line = new RegExp(
      `^run (\\d+) retries run ${startRun.id} \\(${def.slug}, scope ""\\) from step 1 \\(1 skipped\\): now [A-Z]+$`,
    )
    expect(retried.stdout.trim()).toMatch(line)
    const newId = line.exec(retried.stdout.trim())?.[1]
    const linked = await data<{ run: { retryOf: { id: string } | null } }>(
      `query ($id: ID!) { run(id: $id) { retryOf { id } } }`,
      { id: newId },
    )
    expect(linked.run.retryOf).toEqual({ id: startRun.id })

    const badStep = await cli(['run', 'retry', startRun.id, '--from-step', 'two'])
    expect(badStep.code).toBe(2)
    expect(badStep.stderr).toContain('--from-step')

    // A run that never failed (cancelled here) cannot be retried.
    const manual = await createDefinition({ program: LOG_PROGRAM })
    const far = new Date(Date.now() + 86_400_000).toISOString()
    const later = await data<{ startRun: { id: string } }>(
      `mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }`,
      { d: manual.id, at: far },
    )
    await data(`mutation ($id: ID!) { cancelRun(id: $id) { applied } }`, { id: later.startRun.id })
    const refused = await cli(['run', 'retry', later.startRun.id])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain('CONFLICT')
  })
})

describe('run retry-step', () => {
  it('makes the next attempt of a step in backoff now (exit 0); a step not in backoff exits 1', async () => {
    const def = await createDefinition({
      program: {
        phases: [
          {
            name: 'main',
            steps: [
              {
                kind: 'core.webhook',
                params: { url: `${receiver.url}/hooks/flaky` },
                retry: { attempts: 3, backoffSeconds: 600 },
              },
            ],
          },
        ],
      },
    })
    const { startRun } = await data<{ startRun: { id: string } }>(
      `mutation ($d: ID!) { startRun(definitionId: $d) { id } }`,
      { d: def.id },
    )
    const stepOf = async () =>
      (
        await data<{ run: { steps: { id: string; status: string; attempts: number }[] } }>(
          `query ($id: ID!) { run(id: $id) { steps { id status attempts } } }`,
          { id: startRun.id },
        )
      ).run.steps[0]
    const backing = await waitFor(
      async () => {
        const st = await stepOf()
        return st?.status === 'PENDING' && st.attempts === 1 ? st : null
      },
      { what: 'the webhook to back off' },
    )
    const retried = await cli(['run', 'retry-step', backing.id])
    expect(retried, retried.stderr).toMatchObject({ code: 0 })
    expect(retried.stdout.trim()).toBe(`step ${backing.id} of run ${startRun.id}: attempt 2 of 3 now`)
    await waitFor(async () => (await runStatus(startRun.id)) === 'COMPLETED', { what: 'the run to complete' })

    const again = await cli(['run', 'retry-step', backing.id])
    expect(again.code).toBe(1)
    expect(again.stderr).toMatch(/CONFLICT: .*is COMPLETED, not waiting for a retry/)
  })
})

describe('runs bulk', () => {
  it('is a dry run by default (exit 3), applies with --apply (exit 0); an empty filter is refused (exit 1)', async () => {
    const def = await createDefinition({ program: LOG_PROGRAM })
    const ids: string[] = []
    for (const hours of [30, 31, 32]) {
      const at = new Date(Date.now() + hours * 3_600_000).toISOString()
      const made = await data<{ startRun: { id: string } }>(
        `mutation ($d: ID!, $at: DateTime) { startRun(definitionId: $d, at: $at) { id } }`,
        { d: def.id, at },
      )
      ids.push(made.startRun.id)
    }
    const filter = ['--definition', def.slug, '--status', 'scheduled', '--status', 'paused,running']

    const dry = await cli(['runs', 'bulk', 'cancel', ...filter])
    expect(dry, dry.stderr).toMatchObject({ code: 3 })
    expect(dry.stdout.trim()).toBe('would cancel 3 runs; run again with --apply')
    for (const id of ids) expect(await runStatus(id)).toBe('SCHEDULED')

    const applied = await cli(['runs', 'bulk', 'cancel', ...filter, '--apply', '--reason', 'storm', '--json'])
    expect(applied, applied.stderr).toMatchObject({ code: 0 })
    const answer = JSON.parse(applied.stdout) as {
      applied: number
      matched: number
      dryRun: boolean
      bulkId: string
    }
    expect(answer).toMatchObject({ applied: 3, matched: 3, dryRun: false })
    expect(answer.bulkId).toMatch(/^\d+$/)
    for (const id of ids) expect(await runStatus(id)).toBe('CANCELLED')

    const empty = await cli(['runs', 'bulk', 'pause', '--apply'])
    expect(empty.code).toBe(1)
    expect(empty.stderr).toMatch(/BAD_USER_INPUT: filter: give at least one condition/)

    const badStatus = await cli(['runs', 'bulk', 'resume', '--status', 'asleep'])
    expect(badStatus.code).toBe(2)
    expect(badStatus.stderr).toContain('is not a run status')
  })
})

describe('occurrence and calendars', () => {
  it('skips and moves one occurrence, lists calendars; a missing --reason exits 2; a wrong instant exits 1', async () => {
    await data(`mutation ($input: CalendarInput!) { createCalendar(input: $input) { id } }`, {
      input: {
        name: 'ops-holidays',
        timezone: 'Europe/Berlin',
        entries: [{ from: '2026-12-24', to: '2026-12-26', yearly: true, label: 'Christmas' }],
      },
    })
    const def = await createDefinition({
      program: LOG_PROGRAM,
      schedule: '0 12 * * *',
      calendars: ['ops-holidays'],
    })
    const { definition } = await data<{ definition: { nextOccurrences: string[] } }>(
      `query ($slug: String!) { definition(slug: $slug) { nextOccurrences(count: 3) } }`,
      { slug: def.slug },
    )
    const [first, second] = definition.nextOccurrences as [string, string]
    const movedTo = new Date(Date.parse(second) + 3_600_000).toISOString()

    const skipped = await cli(['occurrence', 'skip', def.slug, first, '--reason', 'holiday'])
    expect(skipped, skipped.stderr).toMatchObject({ code: 0 })
    expect(skipped.stdout).toContain(`${def.slug} at ${first} (scope ""): SKIPPED (holiday)`)

    const moved = await cli(['occurrence', 'move', def.slug, second, movedTo, '--reason', 'storm', '--json'])
    expect(moved, moved.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(moved.stdout)).toMatchObject({ at: second, movedTo, status: 'MOVED', reason: 'storm' })

    const upcoming = await data<{ definition: { upcoming: { at: string; status: string }[] } }>(
      `query ($slug: String!, $after: DateTime) { definition(slug: $slug) { upcoming(after: $after, count: 3) { at status } } }`,
      { slug: def.slug, after: new Date(Date.parse(first) - 1000).toISOString() },
    )
    expect(upcoming.definition.upcoming.slice(0, 2)).toEqual([
      { at: first, status: 'SKIPPED' },
      { at: second, status: 'MOVED' },
    ])

    const noReason = await cli(['occurrence', 'skip', def.slug, first])
    expect(noReason.code).toBe(2)
    expect(noReason.stderr).toContain("required option '--reason <text>'")

    const offSchedule = new Date(Date.parse(first) + 60_000).toISOString()
    const refused = await cli(['occurrence', 'skip', def.slug, offSchedule, '--reason', 'x'])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain(`BAD_USER_INPUT: ${offSchedule} is not an occurrence`)

    const calendars = await cli(['calendars'])
    expect(calendars, calendars.stderr).toMatchObject({ code: 0 })
    expect(calendars.stdout).toMatch(/^NAME\s+ZONE\s+FROM\s+TO\s+YEARLY\s+LABEL$/m)
    expect(calendars.stdout).toMatch(
      /^ops-holidays\s+Europe\/Berlin\s+2026-12-24\s+2026-12-26\s+yearly\s+Christmas$/m,
    )
  })
})
