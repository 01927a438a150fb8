/**
 * What every client command shares: where the server is and which token to
 * send (flags, then the environment, then the local server's own admin token
 * file), `--json`, and one way to end: exit codes 0 done, 1 an error (its code
 * printed), 2 a usage mistake, 3 the server answered `applied: false`.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Command } from 'commander'
import { ADMIN_TOKEN_FILE } from '../adminToken.ts'
import { type Client, ClientError, createClient } from '../client/http.ts'

export const EXIT = { done: 0, error: 1, usage: 2, notApplied: 3 } as const

/** The local server `npm start` runs. */
export const DEFAULT_URL = 'http://127.0.0.1:4000'
/** Where the private database keeps its generated admin token (relative to the working folder). */
export const DEFAULT_TOKEN_FILE = join('.data', 'mariadb', ADMIN_TOKEN_FILE)

export interface GlobalOptions {
  url?: string
  token?: string
  json?: boolean
}

/** A mistake in how the command was called: printed with the hint, exit 2. */
export class UsageError extends Error {}

/** A command that finished but must report a non-zero code (diff's "changes", applied: false). */
export class ExitWith extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`)
  }
}

/** Add --url, --token and --json to a client command. */
export function clientOptions(cmd: Command): Command {
  return cmd
    .option('--url <url>', `the server (env SHOWRUNNER_URL; default ${DEFAULT_URL})`)
    .option(
      '--token <token>',
      `bearer token (env SHOWRUNNER_TOKEN; default: ${DEFAULT_TOKEN_FILE} when present)`,
    )
    .option('--json', 'print the answer as JSON, for scripts')
}

/** The GraphQL endpoint for a server URL: a bare origin gets /graphql. */
export function graphqlUrl(raw: string): string {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new UsageError(`--url: ${JSON.stringify(raw)} is not a URL (e.g. ${DEFAULT_URL})`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`--url: use http:// or https://, not ${url.protocol}`)
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/graphql'
  return url.toString()
}

function defaultToken(): string | null {
  try {
    return readFileSync(DEFAULT_TOKEN_FILE, 'utf8').trim() || null
  } catch {
    return null
  }
}

export interface Ctx {
  client: Client
  json: boolean
  url: string
  /** Write a line to stdout. */
  out(line?: string): void
}

/** The options of `cmd` with its parents' (commander keeps them apart). */
export function contextOf(cmd: Command): Ctx {
  const opts = cmd.optsWithGlobals<GlobalOptions>()
  const url = graphqlUrl(opts.url ?? process.env.SHOWRUNNER_URL ?? DEFAULT_URL)
  const token = opts.token ?? process.env.SHOWRUNNER_TOKEN ?? defaultToken()
  return {
    client: createClient({ url, token }),
    json: opts.json === true,
    url,
    out: (line = '') => process.stdout.write(`${line}\n`),
  }
}

/** Print `value` as indented JSON. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`)
}

/**
 * Run a command's body and exit with its code: an error from the server is
 * printed with its code (and every problem with its path), exit 1 (or
 * `errorCode`, for diff's 2).
 */
export async function runCommand(body: () => Promise<number | undefined>, errorCode: number = EXIT.error) {
  let code: number
  try {
    code = (await body()) ?? EXIT.done
  } catch (err) {
    if (err instanceof ExitWith) code = err.code
    else if (err instanceof UsageError) {
      process.stderr.write(`showrunner: ${err.message}\n`)
      code = EXIT.usage
    } else if (err instanceof ClientError) {
      process.stderr.write(`showrunner: ${err.code}: ${err.message}\n`)
      for (const p of err.problems) process.stderr.write(`  ${p.path || '(manifests)'}: ${p.message}\n`)
      if (err.code === 'UNAUTHENTICATED')
        process.stderr.write(
          `  Give a token with --token or SHOWRUNNER_TOKEN (the local server's: cat ${DEFAULT_TOKEN_FILE}).\n`,
        )
      code = errorCode
    } else {
      process.stderr.write(`showrunner: ${(err as Error).message}\n`)
      code = errorCode
    }
  }
  process.exitCode = code
}
