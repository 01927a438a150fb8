/**
 * The `showrunner` client commands as a script runs them: bin/showrunner.js as
 * a child process against the real server (runner on), every command and every
 * exit code: 0 done, 1 an error with its code (a bad token: UNAUTHENTICATED),
 * 2 usage, 3 applied: false (a dry run, a cue answered twice); diff 0 / 1 / 2;
 * watch ends when the run ends.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { type CliResult, runCli } from './helpers/cliClient.ts'
import { eventually, startTestServer, type TestServer, TOKENS } from './helpers/server.ts'

const ROOT = new URL('..', import.meta.url).pathname
let s: TestServer
let dir: string

beforeAll(async () => {
  s = await startTestServer({ runner: true })
  dir = mkdtempSync(join(tmpdir(), 'sr-cli-'))
})
afterAll(async () => {
  await s?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

/** Run the command in `dir` (no admin-token file there), against the test server. */
function cli(
  args: string[],
  opts: { token?: string | null; env?: Record<string, string> } = {},
): Promise<CliResult> {
  return runCli(args, {
    url: s.url,
    cwd: dir,
    token: opts.token === undefined ? TOKENS.admin : opts.token,
    env: opts.env,
  })
}

const SHOWS = join(ROOT, 'shows')

/** Pause definition `slug`'s schedule and cancel every unfinished run it has. */
async function quietDefinition(slug: string): Promise<void> {
  const found = await s.gql<{ definition: { id: string } }>(
    'query($slug: String!) { definition(slug: $slug) { id } }',
    {
      variables: { slug },
    },
  )
  const id = found.body.data?.definition.id as string
  const paused = await s.gql('mutation($id: ID!) { setDefinitionState(id: $id, state: PAUSED) { state } }', {
    variables: { id },
  })
  expect(paused.body.errors, JSON.stringify(paused.body.errors)).toBeUndefined()
  const cancelled = await s.gql(
    'mutation($id: ID!) { bulkRuns(action: CANCEL, dryRun: false, filter: { definitionId: $id }) { matched } }',
    { variables: { id } },
  )
  expect(cancelled.body.errors, JSON.stringify(cancelled.body.errors)).toBeUndefined()
}

describe('apply, diff, export', () => {
  it('applies the shows/ directory, then finds nothing to change', async () => {
    const dry = await cli(['apply', '-f', SHOWS, '--dry-run'])
    expect(dry, dry.stderr).toMatchObject({ code: 3 })
    expect(dry.stdout).toContain('dry run: nothing was applied')
    const none = await s.gql<{ definitions: unknown[] }>('{ definitions { slug } }')
    expect(none.body.data?.definitions).toEqual([])

    const applied = await cli(['apply', '-f', SHOWS])
    expect(applied, applied.stderr).toMatchObject({ code: 0 })
    expect(applied.stdout).toMatch(/^ACTION\s+SLUG\s+FIELDS\s+VERSION$/m)
    expect(applied.stdout).toMatch(/^CREATE\s+demo-cued-show\s+\S+\s+1$/m)
    expect(applied.stdout).toMatch(/^CREATE\s+pub-quiz\s+/m)

    const again = await cli(['apply', '-f', SHOWS, '--json'])
    expect(again.code).toBe(0)
    const plan = JSON.parse(again.stdout) as { applied: boolean; changes: { action: string }[] }
    expect(plan.changes.map((c) => c.action)).toEqual(['UNCHANGED', 'UNCHANGED', 'UNCHANGED'])

    const diff = await cli(['diff', '-f', SHOWS])
    expect(diff, diff.stderr).toMatchObject({ code: 0 })
    expect(diff.stdout).toContain('0 to change, 3 unchanged')
  })

  it('exports what the files say, byte for byte', async () => {
    for (const file of ['demo-cued-show', 'demo-manual', 'pub-quiz']) {
      const out = await cli(['export', file])
      expect(out, out.stderr).toMatchObject({ code: 0 })
      const text = readFileSync(join(SHOWS, `${file}.yaml`), 'utf8').replace(/^#.*\n/gm, '')
      // The files leave defaults out where export writes them; their content is the same.
      expect(parse(out.stdout)).toEqual({ overlap: 'ALLOW_ALL', state: 'ACTIVE', ...parse(text) })
      if (file !== 'pub-quiz') expect(out.stdout).toBe(text)
    }
    const json = await cli(['export', '-o', 'json'])
    expect(JSON.parse(json.stdout).map((m: { slug: string }) => m.slug)).toEqual([
      'demo-cued-show',
      'demo-manual',
      'pub-quiz',
    ])
    const written = await cli(['export', '--dir', join(dir, 'exported')])
    expect(written.code).toBe(0)
    expect(readFileSync(join(dir, 'exported', 'demo-manual.yaml'), 'utf8')).toBe(
      readFileSync(join(SHOWS, 'demo-manual.yaml'), 'utf8').replace(/^#.*\n/gm, ''),
    )
    const unknown = await cli(['export', 'nope'])
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain('NOT_FOUND')
  })

  it('diff shows the fields and the program by step, exit 1; an error is exit 2', async () => {
    const shows = join(dir, 'shows')
    cpSync(SHOWS, shows, { recursive: true })
    const quiz = readFileSync(join(shows, 'pub-quiz.yaml'), 'utf8')
    writeFileSync(
      join(shows, 'pub-quiz.yaml'),
      quiz.replace('title: Pub quiz', 'title: The pub quiz').replace('Read question 1', 'Read question one'),
    )
    writeFileSync(
      join(shows, 'extra.json'),
      JSON.stringify({
        slug: 'extra',
        title: 'Extra',
        program: { phases: [{ name: 'm', steps: [{ kind: 'core.log', params: { message: 'x' } }] }] },
      }),
    )
    const diff = await cli(['diff', '-f', shows])
    expect(diff, diff.stderr).toMatchObject({ code: 1 })
    expect(diff.stdout).toContain('~ pub-quiz (update, version 2)')
    expect(diff.stdout).toContain('    title: "Pub quiz" → "The pub quiz"')
    expect(diff.stdout).toContain('      - main[0] core.cue {"params":{"prompt":"Read question 1"}}')
    expect(diff.stdout).toContain('      + main[0] core.cue {"params":{"prompt":"Read question one"}}')
    expect(diff.stdout).toContain('+ extra (create, version 1)')
    expect(diff.stdout).toContain('2 to change, 2 unchanged')

    // demo-cued-show is scheduled every ten minutes: a run of it live now makes
    // the prune's archive a CONFLICT (exit 2), as apply would be. CI found that
    // at 05:20. Pause it and end its runs, so this diff is the same at any hour.
    await quietDefinition('demo-cued-show')
    const pruned = await cli(['diff', '-f', join(shows, 'pub-quiz.yaml'), '--prune'])
    expect(pruned, pruned.stderr).toMatchObject({ code: 1 })
    expect(pruned.stdout).toContain('- demo-manual (archive)')

    writeFileSync(join(dir, 'broken.yaml'), 'slug: [unclosed\n')
    const broken = await cli(['diff', '-f', join(dir, 'broken.yaml')])
    expect(broken.code).toBe(2)
    expect(broken.stderr).toContain('not valid YAML')
    const usage = await cli(['diff'])
    expect(usage.code).toBe(2)
    const noServer = await cli(['diff', '-f', shows], { env: { SHOWRUNNER_URL: 'http://127.0.0.1:1' } })
    expect(noServer.code).toBe(2)
    expect(noServer.stderr).toContain('NETWORK')
  })

  it('an invalid manifest: exit 1, every problem named by its file, nothing written', async () => {
    writeFileSync(
      join(dir, 'bad.yaml'),
      [
        'slug: bad',
        'title: Bad',
        'program:',
        '  phases:',
        '    - name: main',
        '      steps:',
        '        - kind: core.webhook',
        '          params: { url: 42 }',
        '',
      ].join('\n'),
    )
    const before = await s.gql<{ definitions: unknown[] }>('{ definitions(includeArchived: true) { slug } }')
    const res = await cli(['apply', '-f', SHOWS, join(dir, 'bad.yaml')])
    expect(res.code).toBe(1)
    expect(res.stderr).toContain('BAD_USER_INPUT')
    expect(res.stderr).toMatch(/bad\.yaml: program\.phases\[0\]\.steps\[0\]\.params\.url: /)
    const after = await s.gql<{ definitions: unknown[] }>('{ definitions(includeArchived: true) { slug } }')
    expect(after.body.data).toEqual(before.body.data)
  })

  it('reads several YAML documents per file and JSON lists; problems name the document', async () => {
    const multi = join(dir, 'multi')
    const program = 'program: { phases: [{ name: m, steps: [{ kind: core.log, params: { message: x } }] }] }'
    mkdirSync(multi)
    writeFileSync(
      join(multi, 'a.yaml'),
      `slug: one\ntitle: One\n${program}\n---\nslug: two\ntitle: ""\n${program}\n`,
    )
    writeFileSync(
      join(multi, 'b.json'),
      JSON.stringify([{ slug: 'three', title: 'Three', program: { phases: [] } }]),
    )
    writeFileSync(join(multi, 'notes.txt'), 'not a manifest')
    const res = await cli(['diff', '-f', multi])
    expect(res.code).toBe(2)
    expect(res.stderr).toContain(`${join(multi, 'a.yaml')}#2: title: must be 1–200 characters`)
    expect(res.stderr).toContain(`${join(multi, 'b.json')}[0]: program.phases: must not be empty`)
    expect(res.stderr).not.toContain('a.yaml#1')
    const empty = join(dir, 'empty')
    mkdirSync(empty)
    const none = await cli(['apply', '-f', empty])
    expect(none.code).toBe(1)
    expect(none.stderr).toContain('no *.yaml, *.yml or *.json file')
  })

  it('refuses a bad token (exit 1, UNAUTHENTICATED) and a viewer applying (FORBIDDEN)', async () => {
    const bad = await cli(['runs'], { token: 'not-a-token-of-this-server' })
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain('UNAUTHENTICATED')
    const none = await cli(['health'], { token: null })
    expect(none.code).toBe(1)
    expect(none.stderr).toContain('UNAUTHENTICATED')
    expect(none.stderr).toContain('SHOWRUNNER_TOKEN')
    const viewer = await cli(['apply', '-f', SHOWS], { token: TOKENS.viewer })
    expect(viewer.code).toBe(1)
    expect(viewer.stderr).toContain('FORBIDDEN')
    const flag = await cli(['runs', '--token', TOKENS.viewer], { token: 'wrong-token-in-the-environment' })
    expect(flag.code).toBe(0)
  })

  it('usage mistakes exit 2', async () => {
    expect((await cli(['runs', '--limit', '0'])).code).toBe(2)
    expect((await cli(['runs', '--status', 'sleeping'])).code).toBe(2)
    expect((await cli(['export', '-o', 'xml'])).code).toBe(2)
    expect((await cli(['cue', 'resolve'])).code).toBe(2)
    expect((await cli(['runs', '--url', 'ftp://x'])).code).toBe(2)
    expect((await cli(['--help'])).code).toBe(0)
  })
})

describe('operating runs', () => {
  it('run start, cues, watch, cue resolve twice (0 then 3); watch ends with the run', async () => {
    const started = await cli(['run', 'start', 'demo-manual', '--params', '{"name": "Ada"}'])
    expect(started, started.stderr).toMatchObject({ code: 0 })
    const runId = /^started run (\d+)/m.exec(started.stdout)?.[1] as string
    expect(runId).toBeDefined()
    const watch = cli(['watch', runId])

    const stepId = await eventually(async () => {
      const cues = await cli(['cues', '--json'])
      const list = JSON.parse(cues.stdout) as { id: string; run: { id: string } }[]
      return list.find((c) => c.run.id === runId)?.id
    }, 30_000)
    const table = await cli(['cues'])
    expect(table.stdout).toMatch(/^STEP\s+RUN\s+DEFINITION\s+SCOPE\s+PHASE\s+WAITING\s+FOR\s+PROMPT$/m)
    expect(table.stdout).toMatch(
      new RegExp(`^${stepId}\\s+${runId}\\s+demo-manual\\s+""\\s+main\\s+.*Ready when you are$`, 'm'),
    )
    // An unassigned cue is everybody's, so it is among mine too; for whom the table says.
    expect(table.stdout).toMatch(new RegExp(`^${stepId}\\s.*\\s+anyone\\s+Ready when you are$`, 'm'))
    const mine = await cli(['cues', '--mine', '--json'])
    expect(mine, mine.stderr).toMatchObject({ code: 0 })
    expect((JSON.parse(mine.stdout) as { id: string }[]).map((c) => c.id)).toContain(stepId)

    const runs = await cli(['runs', '--definition', 'demo-manual', '--status', 'running'])
    expect(runs.stdout).toMatch(new RegExp(`^${runId}\\s+demo-manual\\s+""\\s+RUNNING\\s+OK\\s+main`, 'm'))

    const first = await cli(['cue', 'resolve', stepId, '--note', 'doors open'])
    expect(first, first.stderr).toMatchObject({ code: 0 })
    expect(first.stdout).toContain(`resolved step ${stepId}: now COMPLETED`)
    const second = await cli(['cue', 'resolve', stepId])
    expect(second.code).toBe(3)
    expect(second.stdout).toContain('applied: false')

    const watched = await watch
    expect(watched, watched.stderr).toMatchObject({ code: 0 })
    const lines = watched.stdout.trim().split('\n')
    expect(lines.length).toBeGreaterThanOrEqual(2)
    expect(lines.at(-1)).toMatch(new RegExp(`run ${runId}\\s+COMPLETED`))
  }, 90_000)

  it('run pause, resume, cancel (again: exit 3), cue skip; watch of a cancelled run exits 1', async () => {
    const started = await cli(['run', 'start', 'pub-quiz', '--scope', 'cellar', '--json'])
    const run = JSON.parse(started.stdout) as { id: string; scope: string }
    expect(run.scope).toBe('cellar')
    await eventually(
      async () => JSON.parse((await cli(['runs', '--json', '--status', 'running'])).stdout).length > 0,
      30_000,
    )
    const paused = await cli(['run', 'pause', run.id])
    expect(paused, paused.stderr).toMatchObject({ code: 0 })
    expect(paused.stdout).toContain('now PAUSED')
    expect((await cli(['run', 'pause', run.id])).code).toBe(3)
    expect((await cli(['run', 'resume', run.id])).code).toBe(0)
    const stepId = await eventually(async () => {
      const list = JSON.parse((await cli(['cues', '--json'])).stdout) as { id: string; run: { id: string } }[]
      return list.find((c) => c.run.id === run.id)?.id
    }, 30_000)
    const skipped = await cli(['cue', 'skip', stepId, '--note', 'no questions tonight'])
    expect(skipped.code).toBe(0)
    expect(skipped.stdout).toContain('now SKIPPED')
    expect((await cli(['cue', 'skip', stepId])).code).toBe(3)

    const other = JSON.parse((await cli(['run', 'start', 'demo-manual', '--json'])).stdout) as { id: string }
    const watch = cli(['watch', other.id, '--json'])
    const cancelled = await cli(['run', 'cancel', other.id, '--reason', 'rain'])
    expect(cancelled.code).toBe(0)
    expect((await cli(['run', 'cancel', other.id])).code).toBe(3)
    const watched = await watch
    expect(watched.code).toBe(1)
    expect(watched.stderr).toContain('RUN_CANCELLED')
    expect(JSON.parse(watched.stdout.trim().split('\n').at(-1) as string).status).toBe('CANCELLED')
    expect((await cli(['watch', '999999'])).code).toBe(1)
  }, 90_000)

  it('health: 0 when ok, with --json for scripts', async () => {
    const res = await cli(['health'])
    expect(res, res.stderr).toMatchObject({ code: 0 })
    expect(res.stdout).toMatch(/^ok: true {3}database: true/m)
    expect(res.stdout).toMatch(/^RUNNER\s+HOST\s+TICK LAG\s+LAST TICK$/m)
    const json = JSON.parse((await cli(['health', '--json'])).stdout) as { ok: boolean }
    expect(json.ok).toBe(true)
  })
})
