/**
 * Structured logs: pino, one JSON object per line on stdout, every line tagged
 * with the instance that wrote it so logs from several instances can be merged.
 */
import { type DestinationStream, type Logger, pino } from 'pino'
import type { LogLevel } from './config.ts'

export type { Logger }

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** Lowest level written. @default 'info' */
  level?: LogLevel
  /** This process's instance id, written as `instance` on every line. @default undefined (field omitted) */
  instance?: string
  /** Where lines go; tests pass a stream to read them back. @default stdout */
  destination?: DestinationStream
}

/**
 * Paths whose values never reach a log line. Bearer tokens travel in
 * `authorization` headers (HTTP, and `connectionParams` on WebSocket) and in
 * configuration `token` fields; callers log request headers and config objects
 * wholesale, so the logger is the one place that can guarantee they are hidden.
 */
export const REDACT_PATHS = [
  'authorization',
  'Authorization',
  'token',
  '*.authorization',
  '*.Authorization',
  '*.token',
  '*.headers.authorization',
  '*.headers.Authorization',
  '*.*.headers.authorization',
  '*.*.headers.Authorization',
  '*.connectionParams.authorization',
  'tokens[*].token',
  '*.tokens[*].token',
]

export function createLogger(opts: LoggerOptions = {}): Logger {
  const options = {
    level: opts.level ?? 'info',
    base: opts.instance === undefined ? {} : { instance: opts.instance },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    // ISO times read well next to the database's UTC timestamps.
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label: string) => ({ level: label }) },
  }
  // pino's own stdout stream flushes itself on exit, so lines logged just before
  // process.exit are not lost.
  return opts.destination ? pino(options, opts.destination) : pino(options)
}

/** How long {@link flushThenExit} waits for the lines to be written: stdout may be a pipe nobody reads. */
export const EXIT_FLUSH_MS = 2000

/** What {@link flushThenExit} needs of a logger's destination to wait for it (pino's SonicBoom, a Node stream). */
interface EndableStream {
  end(): unknown
  once(event: 'close', listener: () => void): unknown
}

function isEndable(stream: unknown): stream is EndableStream {
  const s = stream as Partial<EndableStream> | null
  return typeof s?.end === 'function' && typeof s.once === 'function'
}

/**
 * Exit with `code` once every line logged so far is written. pino writes
 * stdout asynchronously, and its own hook at process.exit writes what it
 * still buffers at once, but not a write already under way (one waiting on
 * a full pipe, a slow log shipper): those lines came out after later ones
 * or not at all, and a crash's fatal line is the one that must not be lost.
 * Ending the destination writes everything in order, then closes it (stdout
 * itself stays open). Exits anyway after `waitMs`.
 */
export function flushThenExit(
  logger: Logger,
  code: number,
  exit: (code: number) => void = (c) => process.exit(c),
  waitMs = EXIT_FLUSH_MS,
): void {
  // Not unref'd: a process with nothing else left must still exit with `code`, not 0.
  const late = setTimeout(() => exit(code), waitMs)
  const done = () => {
    clearTimeout(late)
    exit(code)
  }
  const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym]
  if (!isEndable(stream)) {
    logger.flush(done)
    return
  }
  stream.once('close', done)
  try {
    stream.end()
  } catch (err) {
    // Already ended or destroyed: nothing is left to write through it.
    process.stderr.write(`showrunner: could not flush the log before exiting: ${(err as Error).message}\n`)
    done()
  }
}

/** A logger that writes nothing, for tests and library callers that do not care. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' })
}
