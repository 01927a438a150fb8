/**
 * The `showrunner` client commands as a script runs them: bin/showrunner.js as
 * a child process with a clean environment (only PATH, the server's URL and
 * the token), so nothing of the test process leaks into what it reads.
 */
import { execFile } from 'node:child_process'
import { join } from 'node:path'

const ROOT = new URL('../..', import.meta.url).pathname

export interface CliResult {
  code: number
  stdout: string
  stderr: string
}

/** Run `showrunner ARGS` in `cwd` against `url`, with `token` as SHOWRUNNER_TOKEN (null: none). */
export function runCli(
  args: string[],
  opts: { url: string; cwd: string; token: string | null; env?: Record<string, string> },
): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '', SHOWRUNNER_URL: opts.url, ...opts.env }
  if (opts.token !== null) env.SHOWRUNNER_TOKEN = opts.token
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(ROOT, 'bin/showrunner.js'), ...args],
      { cwd: opts.cwd, env, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0
        resolve({ code, stdout, stderr })
      },
    )
  })
}
