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

/** A logger that writes nothing, for tests and library callers that do not care. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' })
}
