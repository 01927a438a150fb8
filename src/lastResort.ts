/**
 * The process's last line of defence: what happens to an error nothing caught.
 *
 * - A rejected promise nobody awaited is a bug in one request or one tick, not
 *   a broken process: it is logged at error with its stack and the server keeps
 *   serving (Node's default would end the process, and with it the co-hosted
 *   runner and every claim it holds).
 * - An exception thrown past every handler leaves the process in a state
 *   nothing can vouch for (a half-written structure, a timer that will never
 *   fire again). It is logged at fatal and the server is stopped the graceful
 *   way, so the runner finishes its step and releases its claims for another
 *   instance, then the process exits with code 1 for its supervisor to restart.
 *   A stop that hangs is cut short after `graceMs`.
 */
import { flushThenExit, type Logger } from './log.ts'

export interface LastResortOptions {
  logger: Logger
  /** Graceful shutdown: stop the server (releasing claims) and whatever else the process owns. */
  stop: () => Promise<void>
  /** How long `stop` may take before the process exits anyway. @default 15000 */
  graceMs?: number
  /** @default process.exit */
  exit?: (code: number) => void
}

/** Install the handlers on `process`; answers a function that removes them. */
export function installLastResortHandlers(opts: LastResortOptions): () => void {
  const exit = opts.exit ?? ((code: number) => process.exit(code))
  const graceMs = opts.graceMs ?? 15_000
  let stopping = false

  const onRejection = (reason: unknown) => {
    opts.logger.error(
      { err: reason },
      'a promise was rejected and nothing handled it; this is a bug, the server keeps serving',
    )
  }
  const onException = (err: unknown, origin: string) => {
    opts.logger.fatal(
      { err, origin },
      'an exception escaped every handler; stopping gracefully (claims are released) and exiting with code 1',
    )
    if (stopping) return
    stopping = true
    const force = setTimeout(() => exit(1), graceMs)
    force.unref()
    opts
      .stop()
      .catch((stopErr: unknown) => opts.logger.error({ err: stopErr }, 'the graceful stop failed'))
      .finally(() => {
        clearTimeout(force)
        // The fatal line and the stop's own lines written, in order, before the process ends.
        flushThenExit(opts.logger, 1, exit)
      })
  }
  process.on('unhandledRejection', onRejection)
  process.on('uncaughtException', onException)
  return () => {
    process.off('unhandledRejection', onRejection)
    process.off('uncaughtException', onException)
  }
}
