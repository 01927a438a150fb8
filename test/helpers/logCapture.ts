import { Writable } from 'node:stream'

/** A logger destination that keeps every JSON line written to it, parsed. */
export function captureLog() {
  const lines: Record<string, unknown>[] = []
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line))
      done()
    },
  })
  return { lines, stream }
}
