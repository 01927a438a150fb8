/** `apply`, `diff` and `export`: definitions as files (shows as code). */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Command } from 'commander'
import { stringify } from 'yaml'
import { ClientError } from '../client/http.ts'
import {
  type Ctx,
  clientOptions,
  contextOf,
  EXIT,
  ExitWith,
  printJson,
  runCommand,
  UsageError,
} from './context.ts'
import { renderDiff } from './diff.ts'
import { APPLY, DEFINITION_SLUGS, EXPORT } from './documents.ts'
import { inFile, type Loaded, loadManifests } from './files.ts'
import { table } from './table.ts'

type Manifest = Record<string, unknown>

function slugOf(m: unknown): string | null {
  return m !== null && typeof m === 'object' && typeof (m as Manifest).slug === 'string'
    ? ((m as Manifest).slug as string)
    : null
}

/** Problems as paths in the files they come from. */
function withSources(err: unknown, loaded: Loaded): unknown {
  if (!(err instanceof ClientError) || err.problems.length === 0) return err
  const problems = err.problems.map((p) => ({ ...p, path: inFile(p.path, loaded.sources) }))
  return new ClientError(err.message.split(':')[0] ?? err.message, err.code, problems)
}

async function plan(ctx: Ctx, loaded: Loaded, dryRun: boolean, prune: boolean) {
  try {
    const data = await ctx.client.request(APPLY, { manifests: loaded.manifests, dryRun, prune })
    return data.applyDefinitions
  } catch (err) {
    throw withSources(err, loaded)
  }
}

/** The definitions as they are now, for the slugs a diff shows (all of them with prune). */
async function currentManifests(ctx: Ctx, slugs: Set<string>): Promise<Map<string, Manifest>> {
  const known = (await ctx.client.request(DEFINITION_SLUGS)).definitions.map((d) => d.slug)
  const wanted = known.filter((s) => slugs.has(s))
  if (wanted.length === 0) return new Map()
  const list = (await ctx.client.request(EXPORT, { slugs: wanted })).exportDefinitions as Manifest[]
  return new Map(list.map((m) => [String(m.slug), m]))
}

function filesFrom(opts: { file?: string[] }): Loaded {
  if (!opts.file || opts.file.length === 0)
    throw new UsageError('give the files with -f PATH (a file or a directory)')
  return loadManifests(opts.file)
}

async function printDiff(ctx: Ctx, loaded: Loaded, changes: Parameters<typeof renderDiff>[0]) {
  const slugs = new Set(changes.filter((c) => c.action !== 'UNCHANGED').map((c) => c.slug))
  const current = await currentManifests(ctx, slugs)
  const wanted = new Map<string, Manifest>()
  for (const m of loaded.manifests) {
    const slug = slugOf(m)
    if (slug) wanted.set(slug, m as Manifest)
  }
  const lines = renderDiff(changes, current, wanted)
  const unchanged = changes.filter((c) => c.action === 'UNCHANGED').length
  for (const line of lines) ctx.out(line)
  ctx.out(`${changes.length - unchanged} to change, ${unchanged} unchanged`)
}

export function registerDefinitionCommands(program: Command): void {
  clientOptions(
    program
      .command('apply')
      .description(
        'make the definitions what the files say (matched by slug); exit 3 for a dry run (nothing applied)',
      )
      .requiredOption('-f, --file <path...>', 'manifest files or directories (*.yaml, *.yml, *.json)')
      .option('--dry-run', 'answer the plan, write nothing')
      .option('--prune', 'archive the definitions no file names'),
  ).action((opts: { file?: string[]; dryRun?: boolean; prune?: boolean }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const loaded = filesFrom(opts)
      const result = await plan(ctx, loaded, opts.dryRun === true, opts.prune === true)
      if (ctx.json) printJson(result)
      else {
        ctx.out(
          table(
            ['ACTION', 'SLUG', 'FIELDS', 'VERSION'],
            result.changes.map((c) => [c.action, c.slug, c.fields.join(',') || '-', c.newVersion]),
          ),
        )
        ctx.out(result.applied ? 'applied' : 'dry run: nothing was applied')
      }
      return result.applied ? EXIT.done : EXIT.notApplied
    }),
  )

  clientOptions(
    program
      .command('diff')
      .description('show what apply would change; exit 0 no change, 1 changes, 2 an error')
      .requiredOption('-f, --file <path...>', 'manifest files or directories (*.yaml, *.yml, *.json)')
      .option('--prune', 'include the definitions apply --prune would archive'),
  ).action((opts: { file?: string[]; prune?: boolean }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const loaded = filesFrom(opts)
      const result = await plan(ctx, loaded, true, opts.prune === true)
      if (ctx.json) printJson(result)
      else await printDiff(ctx, loaded, result.changes)
      const changed = result.changes.some((c) => c.action !== 'UNCHANGED')
      throw new ExitWith(changed ? 1 : 0)
    }, EXIT.usage),
  )

  clientOptions(
    program
      .command('export')
      .description('print definitions as manifests (every one not archived, or the slugs named)')
      .argument('[slug...]', 'definitions to export')
      .option('-o, --output <format>', 'yaml or json', 'yaml')
      .option('-d, --dir <dir>', 'write one file per definition (<slug>.yaml or .json) into this directory'),
  ).action((slugs: string[], opts: { output: string; dir?: string }, cmd: Command) =>
    runCommand(async () => {
      const ctx = contextOf(cmd)
      const format = ctx.json ? 'json' : opts.output
      if (format !== 'yaml' && format !== 'json')
        throw new UsageError(`-o: use yaml or json, not ${JSON.stringify(format)}`)
      const data = await ctx.client.request(EXPORT, { slugs: slugs.length > 0 ? slugs : null })
      const manifests = data.exportDefinitions as Manifest[]
      const text = (value: unknown) =>
        format === 'json' ? `${JSON.stringify(value, null, 2)}\n` : stringify(value, { lineWidth: 0 })
      if (opts.dir) {
        mkdirSync(opts.dir, { recursive: true })
        for (const m of manifests) {
          const file = join(opts.dir, `${String(m.slug)}.${format}`)
          writeFileSync(file, text(m))
          ctx.out(`wrote ${file}`)
        }
        return EXIT.done
      }
      if (format === 'json') process.stdout.write(text(manifests))
      else process.stdout.write(manifests.map((m) => text(m)).join('---\n'))
      return EXIT.done
    }),
  )
}
